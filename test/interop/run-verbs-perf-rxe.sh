#!/usr/bin/env bash
# Interop harness, performance over Soft-RoCE: rdisk rdma-perf on the verbs
# provider against perftest (ib_write_bw, ib_read_bw, ib_send_lat) over the
# same rxe device, same sizes and depths, and the Linux nvme-rdma host's 128
# KiB O_DIRECT reads from rdisk's target vs from nvmet-rdma, in one RDMA lab
# guest run (QEMU TCG: the ratios count, not the absolutes). rdisk is built
# here with cgo and -tags verbs. Manual / acceptance only, not part of CI:
# without the lab it prints SKIP and exits 0.
#
# Usage: test/interop/run-verbs-perf-rxe.sh [run-guest.sh options...]
#   LAB=DIR            the lab (default: ../shared/lab next to the project root)
#   PERF_SECS=N        seconds per bandwidth run (default 5)
#   PERF_ROUNDS=N      runs of each tool per case, in turn (default 3; medians compared)
#   PERF_MIN_RATIO=R   rdisk/perftest message rate a bandwidth case needs (default 0.9)
#   PERF_ONLY=bw|lat|nvme  one group of cases
#   PERF_SPIN=D        RDISK_VERBS_POLL_SPIN of rdisk's ends in the bandwidth cases
#   PERF_POLL=busy|event  rdma-perf --busy-poll (default, as perftest) or not
#   PERF_LOG=FILE      full console log (default $TMPDIR/rdisk-verbs-perf.log)
# Exit status: the guest script's.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
LAB=${LAB:-../shared/lab}
[[ $LAB = /* ]] || LAB=$ROOT/$LAB

if [[ ! -x $LAB/run-guest.sh ]]; then
  echo "SKIP: verbs perf over rxe: RDMA lab not found at $LAB (set LAB=/path/to/lab); nothing run"
  exit 0
fi
if ! command -v qemu-system-x86_64 >/dev/null; then
  echo "SKIP: verbs perf over rxe: qemu-system-x86_64 is not installed (apt-get install qemu-system-x86); nothing run"
  exit 0
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "== building rdisk with the verbs provider (CGO_ENABLED=1 -tags verbs)"
if ! (cd "$ROOT" && CGO_ENABLED=1 go build -tags verbs -trimpath -o "$tmp/rdisk" ./cmd/rdisk); then
  echo "PERF: FAIL (build of cmd/rdisk -tags verbs failed: needs libibverbs-dev and librdmacm-dev)"
  exit 1
fi

envs=()
for v in PERF_SECS PERF_ROUNDS PERF_MIN_RATIO PERF_ONLY PERF_SPIN PERF_CLIENT_ARGS PERF_POLL; do
  [[ -n ${!v:-} ]] && envs+=(--env "$v=${!v}")
done
log=${PERF_LOG:-${TMPDIR:-/tmp}/rdisk-verbs-perf.log}
echo "== booting the lab guest ($LAB/run-guest.sh), console log: $log"
"$LAB/run-guest.sh" -t "${PERF_TIMEOUT:-1200}" "${envs[@]}" "$@" \
  "$ROOT/test/interop/guest/verbs-perf-rxe.sh" "$tmp/rdisk" "$LAB/examples/lab-net.sh" > "$log" 2>&1
rc=$?
echo "== result (rc=$rc)"
if grep -q '^=== summary ===' "$log"; then
  sed -n '/^=== summary ===/,$p' "$log" | grep -E '^(PERF|LAB-TIMING)'
else
  grep -E '^(PERF|LAB-|lab: ERROR)' "$log"
  echo "-- no summary: last lines of $log"
  tail -40 "$log"
fi
exit $rc
