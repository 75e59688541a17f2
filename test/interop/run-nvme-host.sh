#!/usr/bin/env bash
# Interop acceptance harness: rdisk's NVMe-oF host (rdisk discover / nvme /
# bench over the pure-Go iWARP provider) against the Linux kernel's NVMe-oF
# target (nvmet-rdma) over soft-iWARP (siw), inside the RDMA lab guest
# (QEMU). Manual / acceptance only, not part of CI: without the lab it prints
# SKIP and exits 0.
#
# Usage: test/interop/run-nvme-host.sh [run-guest.sh options...]
#   LAB=DIR               the lab (default: ../shared/lab next to the project root)
#   NVME_HOST_RUNTIME=N   seconds per bench run in the guest (default 5)
#   NVME_HOST_DEBUG=1     rdisk --log-level debug in the guest
#   NVME_HOST_TRANSPORT=tcp  against nvmet-tcp with nvme+tcp:// URLs
#   NVME_HOST_DIGEST=1    with tcp: header and data digests
#   NVME_HOST_LOG=FILE    full console log (default $TMPDIR/rdisk-nvme-host.log)
#   NVME_HOST_TIMEOUT=N   host-side guard in seconds (default 900)
# Exit status: the guest script's (0 = every case passed).
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
LAB=${LAB:-../shared/lab}
[[ $LAB = /* ]] || LAB=$ROOT/$LAB

if [[ ! -x $LAB/run-guest.sh ]]; then
  echo "SKIP: NVMe-oF host/nvmet interop: RDMA lab not found at $LAB (set LAB=/path/to/lab); nothing run"
  exit 0
fi
if ! command -v qemu-system-x86_64 >/dev/null; then
  echo "SKIP: NVMe-oF host/nvmet interop: qemu-system-x86_64 is not installed (apt-get install qemu-system-x86); nothing run"
  exit 0
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "== building rdisk (CGO_ENABLED=0)"
if ! (cd "$ROOT" && CGO_ENABLED=0 go build -trimpath -o "$tmp/rdisk" ./cmd/rdisk); then
  echo "NVME-HOST: FAIL (build of cmd/rdisk failed)"
  exit 1
fi

envs=()
for v in NVME_HOST_RUNTIME NVME_HOST_DEBUG NVME_HOST_TRANSPORT NVME_HOST_DIGEST; do
  [[ -n ${!v:-} ]] && envs+=(--env "$v=${!v}")
done
log=${NVME_HOST_LOG:-${TMPDIR:-/tmp}/rdisk-nvme-host.log}
echo "== booting the lab guest ($LAB/run-guest.sh), console log: $log"
"$LAB/run-guest.sh" -t "${NVME_HOST_TIMEOUT:-900}" "${envs[@]}" "$@" \
  "$ROOT/test/interop/guest/nvme-host-nvmet.sh" "$tmp/rdisk" "$LAB/examples/lab-net.sh" > "$log" 2>&1
rc=$?
echo "== result (rc=$rc)"
if grep -q '^=== summary ===' "$log"; then
  sed -n '/^=== summary ===/,$p' "$log" | grep -E '^(NVME-HOST|LAB-TIMING)'
else
  grep -E '^(NVME-HOST|LAB-|lab: ERROR)' "$log"
  echo "-- no summary: last lines of $log"
  tail -40 "$log"
fi
exit $rc
