#!/usr/bin/env bash
# Interop acceptance harness: the Linux kernel's NVMe-oF host (nvme-cli;
# nvme-rdma over siw, or nvme-tcp) against `rdisk target` inside the RDMA lab
# guest (QEMU): discover, connect, 64 MiB O_DIRECT write/read/verify, id-ctrl,
# smart-log, flush, dsm, write-zeroes, then rdisk admin adds, resizes and
# removes a namespace (the host must see each), disconnect.
# Manual / acceptance only, not part of CI: without the lab it prints SKIP.
#
#   LAB=DIR              the lab (default: ../shared/lab next to the project root)
#   NVME_MB=N            MiB written and verified (default 64)
#   NVME_BACKING=loop    export a loop device (O_DIRECT) instead of a RAM disk
#   NVME_TRANSPORT=tcp   the kernel's nvme-tcp host instead of nvme-rdma (also
#                        checks the NVMe/TCP discovery port 8009)
#   NVME_DIGEST=1        with tcp: header and data digests (nvme connect -g -G)
#   RDISK_LOG_LEVEL=...  target log level in the guest (default info)
#   NVME_LOG=FILE        full console log (default $TMPDIR/rdisk-nvme-linux-host.log)
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
LAB=${LAB:-../shared/lab}
[[ $LAB = /* ]] || LAB=$ROOT/$LAB
if [[ ! -x $LAB/run-guest.sh ]]; then
  echo "SKIP: NVMe-oF interop: RDMA lab not found at $LAB (set LAB=/path/to/lab); nothing run"
  exit 0
fi
if ! command -v qemu-system-x86_64 >/dev/null; then
  echo "SKIP: NVMe-oF interop: qemu-system-x86_64 is not installed (apt-get install qemu-system-x86); nothing run"
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "== building rdisk (CGO_ENABLED=0)"
(cd "$ROOT" && CGO_ENABLED=0 go build -trimpath -o "$tmp/rdisk" ./cmd/rdisk) || { echo "NVME-LINUX-HOST: FAIL (build)"; exit 1; }
envs=()
for v in NVME_MB NVME_BACKING NVME_TRANSPORT NVME_DIGEST RDISK_LOG_LEVEL; do
  [[ -n ${!v:-} ]] && envs+=(--env "$v=${!v}")
done
log=${NVME_LOG:-${TMPDIR:-/tmp}/rdisk-nvme-linux-host.log}
echo "== booting the lab guest, console log: $log"
"$LAB/run-guest.sh" -t "${NVME_TIMEOUT:-900}" "${envs[@]}" "$@" \
  "$ROOT/test/interop/guest/nvme-linux-host.sh" "$tmp/rdisk" "$LAB/examples/lab-net.sh" > "$log" 2>&1
rc=$?
echo "== result (rc=$rc)"
grep -E '^(NVME-LINUX-HOST|LAB-TIMING|write .* read)' "$log"
[[ $rc = 0 ]] || { echo "-- last lines of $log"; tail -60 "$log"; }
exit $rc
