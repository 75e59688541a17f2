#!/usr/bin/env bash
# Interop acceptance harness: rdisk's two RDMA providers against each other
# over iWARP, in the RDMA lab guest (QEMU): rdisk target on the verbs
# provider (rdma-core over the kernel's siw) <- rdisk bench --verify on the
# pure-Go iWARP provider, and the reverse, over NVMe-oF, iSER and SRP. rdisk
# is built here with cgo and -tags verbs and passed into the guest, whose
# rdma-core libraries it loads. Manual / acceptance only, not part of CI:
# without the lab it prints SKIP and exits 0.
#
# Usage: test/interop/run-verbs-cross.sh [run-guest.sh options...]
#   LAB=DIR            the lab (default: ../shared/lab next to the project root)
#   CROSS_RUNTIME=N    seconds per bench run (default 5)
#   CROSS_ONLY=A|B|M   one direction (A: verbs target, B: iwarp target, M: one target, a verbs port and an iwarp port)
#   CROSS_PROTO="..."  protocols among nvme iser srp (default all)
#   CROSS_DEBUG=1      debug logs on both sides
#   CROSS_LOG=FILE     full console log (default $TMPDIR/rdisk-verbs-cross.log)
# Exit status: the guest script's (0 = every case passed).
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
LAB=${LAB:-../shared/lab}
[[ $LAB = /* ]] || LAB=$ROOT/$LAB

if [[ ! -x $LAB/run-guest.sh ]]; then
  echo "SKIP: verbs cross-provider: RDMA lab not found at $LAB (set LAB=/path/to/lab); nothing run"
  exit 0
fi
if ! command -v qemu-system-x86_64 >/dev/null; then
  echo "SKIP: verbs cross-provider: qemu-system-x86_64 is not installed (apt-get install qemu-system-x86); nothing run"
  exit 0
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "== building rdisk with the verbs provider (CGO_ENABLED=1 -tags verbs)"
if ! (cd "$ROOT" && CGO_ENABLED=1 go build -tags verbs -trimpath -o "$tmp/rdisk" ./cmd/rdisk); then
  echo "CROSS: FAIL (build of cmd/rdisk -tags verbs failed: needs libibverbs-dev and librdmacm-dev)"
  exit 1
fi

envs=()
for v in CROSS_RUNTIME CROSS_ONLY CROSS_PROTO CROSS_DEBUG; do
  [[ -n ${!v:-} ]] && envs+=(--env "$v=${!v}")
done
log=${CROSS_LOG:-${TMPDIR:-/tmp}/rdisk-verbs-cross.log}
echo "== booting the lab guest ($LAB/run-guest.sh), console log: $log"
"$LAB/run-guest.sh" -t "${CROSS_TIMEOUT:-1200}" "${envs[@]}" "$@" \
  "$ROOT/test/interop/guest/verbs-cross.sh" "$tmp/rdisk" "$LAB/examples/lab-net.sh" > "$log" 2>&1
rc=$?
echo "== result (rc=$rc)"
if grep -q '^=== summary ===' "$log"; then
  sed -n '/^=== summary ===/,$p' "$log" | grep -E '^(CROSS|LAB-TIMING)'
else
  grep -E '^(CROSS|LAB-|lab: ERROR)' "$log"
  echo "-- no summary: last lines of $log"
  tail -40 "$log"
fi
exit $rc
