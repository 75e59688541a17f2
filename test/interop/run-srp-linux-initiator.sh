#!/usr/bin/env bash
# Interop acceptance harness: the Linux kernel's SRP initiator (ib_srp over
# siw, logging in through RDMA/CM) against rdisk's SRP target inside the RDMA
# lab guest (QEMU): `rdisk target` serves a RAM disk over SRP on
# 169.254.99.1:5555; add_target, a SCSI disk appears, 64 MiB O_DIRECT
# write/read/verify, small and buffered I/O, a LUN reset, remove the target.
# Manual / acceptance only, not part of CI: without the lab it prints SKIP.
#
#   LAB=DIR              the lab (default: ../shared/lab next to the project root)
#   SRP_MB=N             MiB written and verified (default 64)
#   SRP_EXTRA=OPTS       extra add_target options (e.g. ch_count=2,queue_size=32)
#   SRP_MODPARAMS=...    reload ib_srp with these parameters first, e.g.
#                        "never_register=1" (no memory registration: indirect
#                        descriptors), or "never_register=1 cmd_sg_entries=2
#                        allow_ext_sg=1 indirect_sg_entries=64" (tables longer
#                        than 2 entries outside the IU); the guest then checks
#                        the target's descriptor counters
#   RDISK_LOG_LEVEL=...  target log level in the guest (default debug)
#   SRP_LOG=FILE         full console log (default $TMPDIR/rdisk-srp-linux-initiator.log)
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
LAB=${LAB:-../shared/lab}
[[ $LAB = /* ]] || LAB=$ROOT/$LAB
if [[ ! -x $LAB/run-guest.sh ]]; then
  echo "SKIP: SRP interop: RDMA lab not found at $LAB (set LAB=/path/to/lab); nothing run"
  exit 0
fi
if ! command -v qemu-system-x86_64 >/dev/null; then
  echo "SKIP: SRP interop: qemu-system-x86_64 is not installed (apt-get install qemu-system-x86); nothing run"
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "== building rdisk and test/interop/sgreset (CGO_ENABLED=0)"
(cd "$ROOT" && CGO_ENABLED=0 go build -trimpath -o "$tmp/rdisk" ./cmd/rdisk &&
  CGO_ENABLED=0 go build -trimpath -o "$tmp/sgreset" ./test/interop/sgreset) || { echo "SRP-LINUX-INITIATOR: FAIL (build)"; exit 1; }
envs=()
for v in SRP_MB SRP_EXTRA SRP_MODPARAMS RDISK_LOG_LEVEL SRP_ID_EXT SRP_IOC_GUID; do
  [[ -n ${!v:-} ]] && envs+=(--env "$v=${!v}")
done
log=${SRP_LOG:-${TMPDIR:-/tmp}/rdisk-srp-linux-initiator.log}
echo "== booting the lab guest, console log: $log"
"$LAB/run-guest.sh" -t "${SRP_TIMEOUT:-900}" "${envs[@]}" "$@" \
  "$ROOT/test/interop/guest/srp-linux-initiator.sh" "$tmp/rdisk" "$tmp/sgreset" "$LAB/examples/lab-net.sh" > "$log" 2>&1
rc=$?
echo "== result (rc=$rc)"
grep -E '^(SRP-LINUX-INITIATOR|LAB-TIMING|write .* read)' "$log"
[[ $rc = 0 ]] || { echo "-- last lines of $log"; tail -60 "$log"; }
exit $rc
