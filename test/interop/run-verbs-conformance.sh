#!/usr/bin/env bash
# Interop acceptance harness: the rdma conformance suite (rdma/rdmatest) with
# the cgo verbs provider (rdma/verbs over libibverbs/librdmacm) on the Linux
# kernel's Soft-RoCE (rxe) and soft-iWARP (siw), inside the RDMA lab guest
# (QEMU). The test binary is built here (go test -c -tags verbs, cgo) and
# passed into the guest, whose rdma-core libraries it loads. Manual /
# acceptance only, not part of CI: without the lab it prints SKIP and exits 0.
#
# Usage: test/interop/run-verbs-conformance.sh [run-guest.sh options...]
#   LAB=DIR             the lab (default: ../shared/lab next to the project root)
#   VERBS_ONLY=rxe|siw  one device only
#   VERBS_RUN=REGEXP    tests to run (default 'TestDevices|TestConformance';
#                       e.g. 'TestConformance/RDMARead')
#   VERBS_V=1           the whole go test -v output on the console log
#   VERBS_COUNT=N       run the tests N times (go test -count)
#   VERBS_LOG=FILE      full console log (default $TMPDIR/rdisk-verbs-conformance.log)
# Exit status: the guest script's (0 = every device passed).
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
LAB=${LAB:-../shared/lab}
[[ $LAB = /* ]] || LAB=$ROOT/$LAB

if [[ ! -x $LAB/run-guest.sh ]]; then
  echo "SKIP: verbs conformance: RDMA lab not found at $LAB (set LAB=/path/to/lab); nothing run"
  exit 0
fi
if ! command -v qemu-system-x86_64 >/dev/null; then
  echo "SKIP: verbs conformance: qemu-system-x86_64 is not installed (apt-get install qemu-system-x86); nothing run"
  exit 0
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "== building the rdma/verbs test binary (go test -c -tags verbs, cgo)"
if ! (cd "$ROOT" && CGO_ENABLED=1 go test -c -tags verbs -trimpath -o "$tmp/verbs.test" ./rdma/verbs); then
  echo "VERBS: FAIL (build of the rdma/verbs test binary failed: needs libibverbs-dev and librdmacm-dev)"
  exit 1
fi

envs=()
for v in VERBS_ONLY VERBS_RUN VERBS_V VERBS_COUNT; do
  [[ -n ${!v:-} ]] && envs+=(--env "$v=${!v}")
done
log=${VERBS_LOG:-${TMPDIR:-/tmp}/rdisk-verbs-conformance.log}
echo "== booting the lab guest ($LAB/run-guest.sh), console log: $log"
"$LAB/run-guest.sh" -t "${VERBS_TIMEOUT:-1500}" "${envs[@]}" "$@" \
  "$ROOT/test/interop/guest/verbs-conformance.sh" "$tmp/verbs.test" "$LAB/examples/lab-net.sh" > "$log" 2>&1
rc=$?
echo "== result (rc=$rc)"
if grep -q '^=== summary ===' "$log"; then
  sed -n '/^=== summary ===/,$p' "$log" | grep -E '^(VERBS|LAB-TIMING)'
else
  grep -E '^(VERBS|LAB-|lab: ERROR)' "$log"
  echo "-- no summary: last lines of $log"
  tail -40 "$log"
fi
exit $rc
