#!/usr/bin/env bash
# Interop acceptance harness: rdisk on the verbs provider (rdma-core over
# the kernel's Soft-RoCE, rdma_rxe on dummy0) against the kernel's own RDMA
# storage code, in the RDMA lab guest (QEMU), 64 MiB verified per cell:
# Linux nvme-rdma / ib_srp / open-iscsi+ib_iser -> rdisk target, and rdisk's
# NVMe-oF host / SRP initiator / iSER initiator -> Linux nvmet-rdma /
# ib_srpt / LIO isert. rdisk is built here with cgo and -tags verbs and
# passed into the guest. Manual / acceptance only, not part of CI: without
# the lab it prints SKIP and exits 0.
#
# Usage: test/interop/run-verbs-rxe.sh [run-guest.sh options...]
#   LAB=DIR          the lab (default: ../shared/lab next to the project root)
#   RXE_CELLS="..."  cells among nvme-linux-host srp-linux iser-linux nvme-host srp-host iser-host
#   RXE_MB=N         MiB per cell (default 64)
#   RXE_RUNTIME=N    seconds of rdisk's bench write runs (default 20)
#   RXE_DEBUG=1      rdisk debug logs
#   RXE_LOG=FILE     full console log (default $TMPDIR/rdisk-verbs-rxe.log)
# Exit status: the guest script's (0 = every cell passed).
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
LAB=${LAB:-../shared/lab}
[[ $LAB = /* ]] || LAB=$ROOT/$LAB

if [[ ! -x $LAB/run-guest.sh ]]; then
  echo "SKIP: verbs over rxe: RDMA lab not found at $LAB (set LAB=/path/to/lab); nothing run"
  exit 0
fi
if ! command -v qemu-system-x86_64 >/dev/null; then
  echo "SKIP: verbs over rxe: qemu-system-x86_64 is not installed (apt-get install qemu-system-x86); nothing run"
  exit 0
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "== building rdisk with the verbs provider (CGO_ENABLED=1 -tags verbs)"
if ! (cd "$ROOT" && CGO_ENABLED=1 go build -tags verbs -trimpath -o "$tmp/rdisk" ./cmd/rdisk); then
  echo "RXE: FAIL (build of cmd/rdisk -tags verbs failed: needs libibverbs-dev and librdmacm-dev)"
  exit 1
fi

envs=()
for v in RXE_CELLS RXE_MB RXE_DEBUG RXE_RUNTIME; do
  [[ -n ${!v:-} ]] && envs+=(--env "$v=${!v}")
done
log=${RXE_LOG:-${TMPDIR:-/tmp}/rdisk-verbs-rxe.log}
echo "== booting the lab guest ($LAB/run-guest.sh), console log: $log"
"$LAB/run-guest.sh" -t "${RXE_TIMEOUT:-1500}" "${envs[@]}" "$@" \
  "$ROOT/test/interop/guest/verbs-rxe.sh" "$tmp/rdisk" "$LAB/examples/lab-net.sh" "$LAB/examples/nvmet-lib.sh" > "$log" 2>&1
rc=$?
echo "== result (rc=$rc)"
if grep -q '^=== summary ===' "$log"; then
  sed -n '/^=== summary ===/,$p' "$log" | grep -E '^(RXE|LAB-TIMING)'
else
  grep -E '^(RXE|LAB-|lab: ERROR)' "$log"
  echo "-- no summary: last lines of $log"
  tail -40 "$log"
fi
exit $rc
