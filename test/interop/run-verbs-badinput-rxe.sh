#!/usr/bin/env bash
# Interop acceptance harness, bad input over Soft-RoCE: badcm
# (test/interop/badcm, on the verbs provider) sends malformed RDMA/CM private
# data and junk messages to rdisk's target on verbs/rxe (NVMe-oF, SRP, iSER)
# in the RDMA lab guest (QEMU); each gets the protocol's reject and the
# target keeps serving good hosts. rdisk and badcm are built here with cgo
# and -tags verbs. Manual / acceptance only, not part of CI: without the lab
# it prints SKIP and exits 0.
#
# Usage: test/interop/run-verbs-badinput-rxe.sh [run-guest.sh options...]
#   LAB=DIR          the lab (default: ../shared/lab next to the project root)
#   BADIN_LOG=FILE   full console log (default $TMPDIR/rdisk-verbs-badinput.log)
# Exit status: the guest script's (0 = every case passed).
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
LAB=${LAB:-../shared/lab}
[[ $LAB = /* ]] || LAB=$ROOT/$LAB

if [[ ! -x $LAB/run-guest.sh ]]; then
  echo "SKIP: verbs bad input over rxe: RDMA lab not found at $LAB (set LAB=/path/to/lab); nothing run"
  exit 0
fi
if ! command -v qemu-system-x86_64 >/dev/null; then
  echo "SKIP: verbs bad input over rxe: qemu-system-x86_64 is not installed (apt-get install qemu-system-x86); nothing run"
  exit 0
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "== building rdisk with the verbs provider (CGO_ENABLED=1 -tags verbs)"
if ! (cd "$ROOT" && CGO_ENABLED=1 go build -tags verbs -trimpath -o "$tmp/rdisk" ./cmd/rdisk); then
  echo "BADIN: FAIL (build of cmd/rdisk -tags verbs failed: needs libibverbs-dev and librdmacm-dev)"
  exit 1
fi
if ! (cd "$ROOT" && CGO_ENABLED=1 go build -tags verbs -trimpath -o "$tmp/badcm" ./test/interop/badcm); then
  echo "BADIN: FAIL (build of test/interop/badcm -tags verbs failed)"
  exit 1
fi

envs=()
for v in BADIN_NONE; do
  [[ -n ${!v:-} ]] && envs+=(--env "$v=${!v}")
done
log=${BADIN_LOG:-${TMPDIR:-/tmp}/rdisk-verbs-badinput.log}
echo "== booting the lab guest ($LAB/run-guest.sh), console log: $log"
"$LAB/run-guest.sh" -t "${BADIN_TIMEOUT:-900}" "${envs[@]}" "$@" \
  "$ROOT/test/interop/guest/verbs-badinput-rxe.sh" "$tmp/rdisk" "$tmp/badcm" "$LAB/examples/lab-net.sh" > "$log" 2>&1
rc=$?
echo "== result (rc=$rc)"
if grep -q '^=== summary ===' "$log"; then
  sed -n '/^=== summary ===/,$p' "$log" | grep -E '^(BADIN|LAB-TIMING)'
else
  grep -E '^(BADIN|LAB-|lab: ERROR)' "$log"
  echo "-- no summary: last lines of $log"
  tail -40 "$log"
fi
exit $rc
