#!/usr/bin/env bash
# Interop acceptance harness: the Linux kernel's iSCSI initiators (open-iscsi
# with the iser iface over siw, and iscsi_tcp) against rdisk's iSCSI/iSER
# portal (`rdisk target` on 169.254.99.1:3260) inside the RDMA lab guest
# (QEMU): SendTargets discovery, login, a SCSI disk, 64 MiB O_DIRECT
# write/read/verify, logout, for each transport.
# Manual / acceptance only, not part of CI: without the lab it prints SKIP.
#
#   LAB=DIR         the lab (default: ../shared/lab next to the project root)
#   ISER_MB=N       MiB written and verified (default 64)
#   RDISK_LOG_LEVEL=...  target log level in the guest (default info)
#   ISER_LOG=FILE   full console log (default $TMPDIR/rdisk-iser-linux.log)
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
LAB=${LAB:-../shared/lab}
[[ $LAB = /* ]] || LAB=$ROOT/$LAB
if [[ ! -x $LAB/run-guest.sh ]]; then
  echo "SKIP: iSER interop: RDMA lab not found at $LAB (set LAB=/path/to/lab); nothing run"
  exit 0
fi
if ! command -v qemu-system-x86_64 >/dev/null; then
  echo "SKIP: iSER interop: qemu-system-x86_64 is not installed (apt-get install qemu-system-x86); nothing run"
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "== building rdisk (CGO_ENABLED=0)"
(cd "$ROOT" && CGO_ENABLED=0 go build -trimpath -o "$tmp/rdisk" ./cmd/rdisk) || { echo "ISER-LINUX: FAIL (build)"; exit 1; }
# The lab image has no iscsi_tcp: pass the two modules from the lab's
# unpacked kernel so the guest can insmod them (libiscsi is in the image).
extra=()
cache=${LAB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rdisk-lab}
if [[ -f $cache/KVER ]]; then
  kdir=$cache/root/lib/modules/$(cat "$cache/KVER")/kernel/drivers/scsi
  for m in libiscsi_tcp iscsi_tcp; do
    [[ -f $kdir/$m.ko ]] && extra+=("$kdir/$m.ko")
  done
fi
envs=()
for v in ISER_MB RDISK_LOG_LEVEL; do
  [[ -n ${!v:-} ]] && envs+=(--env "$v=${!v}")
done
log=${ISER_LOG:-${TMPDIR:-/tmp}/rdisk-iser-linux.log}
echo "== booting the lab guest, console log: $log"
"$LAB/run-guest.sh" -t "${ISER_TIMEOUT:-900}" "${envs[@]}" "$@" \
  "$ROOT/test/interop/guest/iser-linux-initiator.sh" "$tmp/rdisk" "$LAB/examples/lab-net.sh" "${extra[@]}" > "$log" 2>&1
rc=$?
echo "== result (rc=$rc)"
grep -E '^(ISER-LINUX|LAB-TIMING|iser: write|tcp: write|disk /dev)' "$log"
[[ $rc = 0 ]] || { echo "-- last lines of $log"; tail -80 "$log"; }
exit $rc
