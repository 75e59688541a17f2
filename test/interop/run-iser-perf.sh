#!/usr/bin/env bash
# iscsi-perf (libiscsi) 4 KiB random read QD32 against rdisk's iSCSI/TCP
# portal (`rdisk target --fill`) and against tgt (Debian tgt), each on a 1 GiB RAM-backed LUN filled
# with random data, interleaved REPS times, on 127.0.0.1. Prints the IOPS of
# each run and the ratio of the medians. Needs root for tgtd; skips a peer
# whose tools are missing (apt-get install libiscsi-bin tgt).
#
#   REPS=N  runs per target (default 3)   DUR=S  seconds per run (default 10)
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
REPS=${REPS:-3} DUR=${DUR:-10}
RPORT=3271 TPORT=3272
IQN_R=iqn.2026-11.io.rdisk:perf IQN_T=iqn.2026-11.io.rdisk:tgt-perf
command -v iscsi-perf >/dev/null || { echo "SKIP: iscsi-perf not installed (apt-get install libiscsi-bin)"; exit 0; }
tmp=$(mktemp -d)
RPID= GPID=
cleanup() {
  [[ -n $RPID ]] && kill "$RPID" 2>/dev/null
  if [[ -n $GPID ]] && kill -0 "$GPID" 2>/dev/null; then
    timeout 10 tgtadm -C 9 --lld iscsi --mode target --op delete --force --tid 1 >/dev/null 2>&1
    timeout 10 tgtadm -C 9 --mode system --op delete >/dev/null 2>&1
    sleep 1; kill "$GPID" 2>/dev/null
  fi
  rm -rf "$tmp" /dev/shm/rdisk-iser-perf.img
}
trap cleanup EXIT
(cd "$ROOT" && CGO_ENABLED=0 go build -trimpath -o "$tmp/rdisk" ./cmd/rdisk) || exit 1
# --fill writes random data over the whole RAM LUN first: a sparse RAM disk
# would read unwritten blocks as zeroes without touching memory. NVMe-oF on
# a free loopback port, no SRP: only the iSCSI portal is measured.
"$tmp/rdisk" target --iscsi-listen 127.0.0.1:$RPORT --iqn $IQN_R --size 1GiB --fill \
  --listen 127.0.0.1:0 --srp-listen "" >"$tmp/rdisk.log" 2>&1 &
RPID=$!
for _ in $(seq 300); do grep -q "iSCSI/TCP and iSER" "$tmp/rdisk.log" && break; sleep 0.1; done
grep -q "iSCSI/TCP and iSER" "$tmp/rdisk.log" || { echo "rdisk target did not start:"; cat "$tmp/rdisk.log"; exit 1; }
have_tgt=0
if command -v tgtd >/dev/null && [[ $(id -u) = 0 ]]; then
  dd if=/dev/urandom of=/dev/shm/rdisk-iser-perf.img bs=1M count=1024 status=none
  tgtd -f -C 9 --iscsi portal=127.0.0.1:$TPORT >"$tmp/tgtd.log" 2>&1 &
  GPID=$!
  for _ in $(seq 50); do tgtadm -C 9 --lld iscsi --mode target --op show >/dev/null 2>&1 && break; sleep 0.1; done
  tgtadm -C 9 --lld iscsi --mode target --op new --tid 1 --targetname $IQN_T &&
  tgtadm -C 9 --lld iscsi --mode logicalunit --op new --tid 1 --lun 1 --backing-store /dev/shm/rdisk-iser-perf.img --bstype rdwr &&
  tgtadm -C 9 --lld iscsi --mode target --op bind --tid 1 --initiator-address 127.0.0.1 && have_tgt=1
else
  echo "tgt: not installed or not root; rdisk only"
fi
perf() { # URL -> IOPS
  timeout -k 5 $((DUR + 30)) iscsi-perf -r -m 32 -b 8 -t "$DUR" "$1" 2>&1 | tr '\r' '\n' >"$tmp/perf.log"
  grep -q '^finished' "$tmp/perf.log" || { echo NA; return; }
  sed -n 's/^iops average \([0-9]*\) .*/\1/p' "$tmp/perf.log" | tail -1
}
median() { tr ' ' '\n' | grep -v NA | sort -n | awk '{a[NR]=$1} END {if (NR) print a[int((NR+1)/2)]; else print "NA"}'; }
R=() T=()
for r in $(seq "$REPS"); do
  R+=("$(perf "iscsi://127.0.0.1:$RPORT/$IQN_R/0")")
  [[ $have_tgt = 1 ]] && T+=("$(perf "iscsi://127.0.0.1:$TPORT/$IQN_T/1")")
  echo "rep $r: rdisk ${R[-1]} IOPS${T:+, tgt ${T[-1]} IOPS}"
done
mr=$(echo "${R[*]}" | median)
echo "iscsi-perf -r -m 32 -b 8 -t $DUR (4 KiB random read, QD32), median of $REPS:"
echo "  rdisk: $mr IOPS  (runs: ${R[*]})"
if [[ $have_tgt = 1 ]]; then
  mt=$(echo "${T[*]}" | median)
  echo "  tgt:   $mt IOPS  (runs: ${T[*]})"
  [[ $mr != NA && $mt != NA ]] && awk -v a="$mr" -v b="$mt" 'BEGIN {printf "  rdisk / tgt = %.2f\n", a / b}'
fi
