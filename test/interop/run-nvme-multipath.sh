#!/usr/bin/env bash
# Interop acceptance harness: Linux native NVMe multipath (nvme-tcp, or
# nvme-rdma over siw with NVME_TRANSPORT=rdma) over two `rdisk target`
# gateways inside the RDMA lab guest (QEMU) exporting one file-backed disk
# with ANA groups: two paths in nvme list-subsys, O_DIRECT verify while the
# optimized gateway is SIGKILLed and restarted, ANA change by rdisk admin.
# Manual / acceptance only, not part of CI: without the lab it prints SKIP.
#
#   LAB=DIR              the lab (default: ../shared/lab next to the project root)
#   NVME_TRANSPORT=rdma  nvme-rdma over siw instead of nvme-tcp
#   RDISK_LOG_LEVEL=...  target log level in the guest (default info)
#   MPATH_LOG=FILE       full console log (default $TMPDIR/rdisk-nvme-multipath.log)
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
LAB=${LAB:-../shared/lab}
[[ $LAB = /* ]] || LAB=$ROOT/$LAB
if [[ ! -x $LAB/run-guest.sh ]]; then
  echo "SKIP: NVMe multipath interop: RDMA lab not found at $LAB (set LAB=/path/to/lab); nothing run"
  exit 0
fi
if ! command -v qemu-system-x86_64 >/dev/null; then
  echo "SKIP: NVMe multipath interop: qemu-system-x86_64 is not installed (apt-get install qemu-system-x86); nothing run"
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "== building rdisk (CGO_ENABLED=0)"
(cd "$ROOT" && CGO_ENABLED=0 go build -trimpath -o "$tmp/rdisk" ./cmd/rdisk) || { echo "NVME-MULTIPATH: FAIL (build)"; exit 1; }
envs=()
for v in NVME_TRANSPORT RDISK_LOG_LEVEL; do
  [[ -n ${!v:-} ]] && envs+=(--env "$v=${!v}")
done
log=${MPATH_LOG:-${TMPDIR:-/tmp}/rdisk-nvme-multipath.log}
echo "== booting the lab guest, console log: $log"
"$LAB/run-guest.sh" -t "${MPATH_TIMEOUT:-900}" "${envs[@]}" "$@" \
  "$ROOT/test/interop/guest/nvme-multipath.sh" "$tmp/rdisk" "$LAB/examples/lab-net.sh" > "$log" 2>&1
rc=$?
echo "== result (rc=$rc)"
grep -E '^(NVME-MULTIPATH|LAB-TIMING|reads |after SIGKILL|A gone|A inaccessible|verify passes)' "$log"
[[ $rc = 0 ]] || { echo "-- last lines of $log"; tail -60 "$log"; }
exit $rc
