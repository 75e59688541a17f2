#!/usr/bin/env bash
# Interop acceptance harness: our Go rping (test/interop/rping, over the rdisk
# rdma API and the pure-Go iWARP provider) against rdma-core's rping over the
# Linux kernel's soft-iWARP (siw), in both directions, inside the RDMA lab
# guest (QEMU). Manual / acceptance only, not part of CI: without the lab it
# prints SKIP and exits 0.
#
# Usage: test/interop/run-rping.sh [run-guest.sh options...]
#   LAB=DIR            the lab (default: ../shared/lab next to the project root)
#   RPING_COUNT=N      pings per direction (default 20)
#   RPING_SIZE=N       ping size in bytes (default 64, 26..65535)
#   RPING_MATRIX=1     also run 65535 B x 10, and with MPA CRC 4096 B x 10 and
#                      65535 B x 5 (our side asks for CRC; siw follows)
#   RPING_HEXDUMP=1    our side relays the TCP stream in-process and logs
#                      every MPA frame / FPDU (decoded + hex)
#   RPING_DEBUG=1      debug logging on our side
#   RPING_SIW_DEBUG=1  siw dynamic debug in the guest's dmesg
#   RPING_ONLY=a|b     run one direction only
#   RPING_LOG=FILE     full console log (default $TMPDIR/rdisk-rping-siw.log)
# Exit status: the guest script's (0 = both directions passed).
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
LAB=${LAB:-../shared/lab}
[[ $LAB = /* ]] || LAB=$ROOT/$LAB

if [[ ! -x $LAB/run-guest.sh ]]; then
  echo "SKIP: rping/siw interop: RDMA lab not found at $LAB (set LAB=/path/to/lab); nothing run"
  exit 0
fi
if ! command -v qemu-system-x86_64 >/dev/null; then
  echo "SKIP: rping/siw interop: qemu-system-x86_64 is not installed (apt-get install qemu-system-x86); nothing run"
  exit 0
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "== building test/interop/rping (CGO_ENABLED=0)"
if ! (cd "$ROOT" && CGO_ENABLED=0 go build -trimpath -o "$tmp/rping-go" ./test/interop/rping); then
  echo "RPING-SIW: FAIL (build of test/interop/rping failed)"
  exit 1
fi

envs=()
for v in RPING_COUNT RPING_SIZE RPING_MATRIX RPING_HEXDUMP RPING_DEBUG RPING_SIW_DEBUG RPING_ONLY; do
  [[ -n ${!v:-} ]] && envs+=(--env "$v=${!v}")
done
log=${RPING_LOG:-${TMPDIR:-/tmp}/rdisk-rping-siw.log}
echo "== booting the lab guest ($LAB/run-guest.sh), console log: $log"
"$LAB/run-guest.sh" -t "${RPING_TIMEOUT:-900}" "${envs[@]}" "$@" \
  "$ROOT/test/interop/guest/rping-siw.sh" "$tmp/rping-go" "$LAB/examples/lab-net.sh" > "$log" 2>&1
rc=$?
echo "== result (rc=$rc)"
if grep -q '^=== summary ===' "$log"; then
  sed -n '/^=== summary ===/,$p' "$log" | grep -E '^(RPING-SIW|LAB-TIMING)'
else
  grep -E '^(RPING-SIW|LAB-|lab: ERROR)' "$log"
  echo "-- no summary: last lines of $log"
  tail -40 "$log"
fi
exit $rc
