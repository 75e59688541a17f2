#!/bin/sh
# rdisk interop, performance side by side over Soft-RoCE: rdisk rdma-perf on
# the verbs provider (rdma-core over rdma_rxe) against perftest's
# ib_write_bw / ib_read_bw / ib_send_lat over the same rxe device, the same
# sizes and depths, in the same guest run; then the Linux nvme-rdma host
# reading 128 KiB O_DIRECT from rdisk's NVMe-oF target and from the kernel's
# nvmet-rdma over the same link. Under QEMU TCG the absolute numbers mean
# little (both ends share the guest's 2 emulated CPUs); the ratios are what
# counts. Run it through test/interop/run-verbs-perf-rxe.sh; /guest/files
# (PATH): rdisk (CGO_ENABLED=1 -tags verbs) and the lab's lab-net.sh.
# Environment: PERF_SECS (seconds per bandwidth run, default 5),
#   PERF_ROUNDS (runs of each tool per case, in turn, default 3; medians compared),
#   PERF_MIN_RATIO (the ratio a bandwidth case must reach to PASS, default 0.9),
#   PERF_ONLY=bw|q1|lat|nvme (one group of cases), PERF_SPIN (RDISK_VERBS_POLL_SPIN
#   of rdisk's ends in the bandwidth cases; the latency cases run without and with),
#   PERF_CLIENT_ARGS (more rdisk rdma-perf client flags in the bandwidth cases, e.g. --cpus 2),
#   PERF_POLL=busy|event (default busy: rdma-perf --busy-poll, as perftest polls
#   without -e; event: rdisk's queues' polling budget, then the completion channel).
# Output: "PERF-<case>: PASS|FAIL rdisk=... perftest=... ratio=..." lines, a
# summary and "PERF: PASS|FAIL".
if [ -f /guest/files/lab-net.sh ]; then
  . /guest/files/lab-net.sh
else
  LAB_IP=169.254.99.1
  lab_dummy_up() {
    ip link show dummy0 >/dev/null 2>&1 || ip link add dummy0 type dummy
    ip link set dummy0 up
    ip addr add $LAB_IP/16 dev dummy0 2>/dev/null || true
  }
fi
SECS=${PERF_SECS:-5}
ROUNDS=${PERF_ROUNDS:-3}
MIN=${PERF_MIN_RATIO:-0.9}
NQN=nqn.2026-11.io.rdisk:default
KNQN=nqn.2026-11.io.rdisk:nvmet-perf
NVMET=/sys/kernel/config/nvmet
SUMMARY=/tmp/summary.txt
: > $SUMMARY
failed=0
result() {
  line="PERF-$1: $2 $3"
  echo "$line"; echo "$line" >> $SUMMARY
  [ "$2" = PASS ] || [ "$2" = INFO ] || failed=1
}
json_num() { # FILE KEY: a number of rdisk's one-line JSON
  tr ',{}' '\n\n\n' < "$1" | sed -n "s/^ *\"$2\": *\([0-9.e+-]*\)$/\1/p" | head -1
}

echo "PERF: kernel=$(uname -r) rdisk=$(command -v rdisk) secs=$SECS min_ratio=$MIN"
lab_dummy_up
rdma link add rxe0 type rxe netdev dummy0 || { echo "PERF: FAIL (rdma link add rxe0)"; exit 1; }
ulimit -l unlimited 2>/dev/null
rdma link show rxe0/1

pollarg=--busy-poll
[ "${PERF_POLL:-busy}" = event ] && pollarg=

# median A B C ...: the median of numbers
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {print v[int((NR + 1) / 2)]}'; }

# bw_case NAME PERFTEST OP SIZE DEPTH [PERFTEST_ARGS]: perftest's message
# rate against rdisk rdma-perf's msgs_per_sec at the same size and depth, each
# run PERF_ROUNDS times in turn (TCG's noise between runs is large), the
# medians compared.
bw_case() {
  name=$1 tool=$2 op=$3 size=$4 depth=$5 targs=${6:-}
  echo; echo "=== $name: $tool -s $size -t $depth $targs vs rdisk rdma-perf $pollarg --op $op --size $size --qd $depth, ${ROUNDS}x in turn, RDISK_VERBS_POLL_SPIN=${PERF_SPIN:-unset}"
  extra=$targs
  [ $tool = ib_read_bw ] && extra="$extra -o $depth"
  ps= rs= rbws= pmibs=
  r=0 retries=0
  while [ $r -lt $ROUNDS ]; do
    r=$((r + 1))
    $tool -R -d rxe0 -F -s $size -t $depth $extra -D $SECS -p 18515 > /tmp/$name-srv.log 2>&1 & srv=$!
    sleep 1
    timeout $((SECS + 60)) $tool -R -d rxe0 -F -s $size -t $depth $extra -D $SECS -p 18515 $LAB_IP > /tmp/$name-cli.log 2>&1
    wait $srv
    # The result line: #bytes #iterations BW-peak BW-average[MiB/s] MsgRate[Mpps]
    pm=$(awk -v s=$size '$1 == s && NF >= 5 {v=$5} END {print v}' /tmp/$name-cli.log)
    pb=$(awk -v s=$size '$1 == s && NF >= 5 {v=$4} END {print v}' /tmp/$name-cli.log)
    RDISK_VERBS_POLL_SPIN=${PERF_SPIN:-} rdisk --rdma verbs rdma-perf server --listen $LAB_IP:18600 > /tmp/$name-rsrv.log 2>&1 & rsrv=$!
    sleep 1
    RDISK_VERBS_POLL_SPIN=${PERF_SPIN:-} rdisk --rdma verbs rdma-perf client $LAB_IP:18600 $pollarg ${PERF_CLIENT_ARGS:-} --op $op --size $size --qd $depth --duration ${SECS}s --json > /tmp/$name-r.json 2> /tmp/$name-r.err
    rc=$?
    kill $rsrv 2>/dev/null; wait $rsrv 2>/dev/null
    rm=$(json_num /tmp/$name-r.json msgs_per_sec)
    rb=$(json_num /tmp/$name-r.json bw_bytes_per_sec)
    echo "round $r: perftest ${pb:-?} MiB/s; rdisk ${rm:-?} msg/s $(awk -v b=${rb:-0} 'BEGIN {printf "%.1f", b / 1048576}') MiB/s (rc=$rc)"
    if [ -n "$pb" ] && awk -v b=$pb 'BEGIN {exit !(b == 0)}'; then
      # perftest measured nothing (seen once with ib_read_bw under TCG):
      # the round is run again.
      echo "round $r: perftest reported 0, again"; tail -5 /tmp/$name-cli.log
      r=$((r - 1)); retries=$((retries + 1))
      [ $retries -le 2 ] && continue
    fi
    if [ $rc != 0 ] || [ -z "$rm" ] || [ -z "$pm" ]; then
      tail -5 /tmp/$name-cli.log; tail -3 /tmp/$name-r.err
      result $name FAIL "round $r: rc=$rc rdisk_msgs=${rm:-?} perftest_Mpps=${pm:-?}: $(tail -c 200 /tmp/$name-r.err) $(tail -c 200 /tmp/$name-cli.log)"
      return
    fi
    # perftest's message rate from its average bandwidth (MiB/s, 2
    # decimals): its Mpps column has 6 decimals, too few at TCG rates.
    ps="$ps $(awk -v b=$pb -v s=$size 'BEGIN {printf "%.1f", b * 1048576 / s}')" rs="$rs $rm" rbws="$rbws $rb" pmibs="$pmibs $pb"
  done
  pmed=$(median $ps) rmed=$(median $rs) rbw=$(median $rbws) pmib=$(median $pmibs)
  ratio=$(awk -v r=$rmed -v p=$pmed 'BEGIN {printf "%.2f", r / p}')
  d="size=$size depth=$depth median of $ROUNDS: rdisk=$(awk -v r=$rmed -v b=$rbw 'BEGIN {printf "%.0f msg/s %.1f MiB/s", r, b / 1048576}') perftest=$(awk -v p=$pmed -v m=$pmib 'BEGIN {printf "%.0f msg/s %.1f MiB/s", p, m}') ratio=$ratio"
  if awk -v x=$ratio -v m=$MIN 'BEGIN {exit !(x >= m)}'; then result $name PASS "$d"; else result $name FAIL "$d (below $MIN)"; fi
}

if [ "${PERF_ONLY:-all}" = all ] || [ "${PERF_ONLY:-}" = bw ]; then
bw_case write-64k ib_write_bw write 65536 16
bw_case write-4k ib_write_bw write 4096 16
bw_case read-64k ib_read_bw read 65536 16
bw_case read-4k ib_read_bw read 4096 16
fi
# perftest moderates its completions (a signaled WR every min(100, depth));
# rdma-perf signals every operation, for its latency histogram. With -Q 1
# perftest signals every WR too: the same work per operation.
if [ "${PERF_ONLY:-all}" = all ] || [ "${PERF_ONLY:-}" = bw ] || [ "${PERF_ONLY:-}" = q1 ]; then
bw_case write-4k-Q1 ib_write_bw write 4096 16 "-Q 1"
bw_case read-4k-Q1 ib_read_bw read 4096 16 "-Q 1"
fi

# Latency: ib_send_lat (ping-pong of Sends, depth 1, busy-polling) vs
# rdisk rdma-perf send --qd 1, with both rdisk ends' RDISK_VERBS_POLL_SPIN
# at SPIN ("" = the default: no spin past the 64 polls).
lat_case() { # NAME SPIN
  name=$1 spin=$2
  echo; echo "=== $name: ib_send_lat -s 64 vs rdisk rdma-perf --op send --size 64 --qd 1, RDISK_VERBS_POLL_SPIN=${spin:-unset}"
  ib_send_lat -R -d rxe0 -F -s 64 -n 2000 -p 18516 > /tmp/lat-srv.log 2>&1 & srv=$!
  sleep 1
  timeout 120 ib_send_lat -R -d rxe0 -F -s 64 -n 2000 -p 18516 $LAB_IP > /tmp/lat-cli.log 2>&1
  wait $srv
  tail -5 /tmp/lat-cli.log
  # #bytes #iterations t_min t_max t_typical t_avg t_stdev 99% 99.9%
  ptyp=$(awk '$1 == 64 && NF >= 9 {v=$5} END {print v}' /tmp/lat-cli.log)
  pavg=$(awk '$1 == 64 && NF >= 9 {v=$6} END {print v}' /tmp/lat-cli.log)
  RDISK_VERBS_POLL_SPIN=$spin rdisk --rdma verbs rdma-perf server --listen $LAB_IP:18601 > /tmp/lat-rsrv.log 2>&1 & rsrv=$!
  sleep 1
  RDISK_VERBS_POLL_SPIN=$spin rdisk --rdma verbs rdma-perf client $LAB_IP:18601 --op send --size 64 --qd 1 --duration ${SECS}s --json > /tmp/lat-r.json 2> /tmp/lat-r.err; rc=$?
  kill $rsrv 2>/dev/null; wait $rsrv 2>/dev/null
  cat /tmp/lat-r.json
  rp50=$(json_num /tmp/lat-r.json p50); rmean=$(json_num /tmp/lat-r.json mean)
  if [ $rc = 0 ] && [ -n "$rp50" ] && [ -n "$ptyp" ]; then
    # ib_send_lat reports half the round trip (t_typical = RTT/2); rdisk's
    # send latency is the whole round trip of a Send and its echo.
    ratio=$(awk -v r=$rp50 -v p=$ptyp 'BEGIN {printf "%.2f", (2 * p) / r}')
    result $name INFO "rdisk p50=${rp50}us mean=${rmean}us (round trip) perftest t_typical=${ptyp}us t_avg=${pavg}us (half round trip) speed ratio perftest_RTT/rdisk_p50=$ratio"
  else
    result $name FAIL "rc=$rc rdisk_p50=${rp50:-?} perftest=${ptyp:-?}: $(tail -c 200 /tmp/lat-r.err)"
  fi
}
if [ "${PERF_ONLY:-all}" = all ] || [ "${PERF_ONLY:-}" = lat ]; then
  lat_case send-lat-64 ""
  lat_case send-lat-64-spin200us 200us
  lat_case send-lat-64-spin2ms 2ms
fi

if [ "${PERF_ONLY:-all}" = all ] || [ "${PERF_ONLY:-}" = nvme ]; then
# --- Linux nvme-rdma host, 128 KiB O_DIRECT reads: rdisk target vs nvmet-rdma.
read_dev() { # DEV: MiB/s of 64 MiB of 128 KiB O_DIRECT reads
  t0=$(cut -d' ' -f1 /proc/uptime)
  dd if=$1 of=/dev/null bs=128k count=512 iflag=direct 2>/dev/null || { echo 0; return; }
  t1=$(cut -d' ' -f1 /proc/uptime)
  awk -v a=$t0 -v b=$t1 'BEGIN {printf "%.1f", 64 / (b - a)}'
}
nvme_dev() { # NQN
  i=0
  while [ $i -lt 100 ]; do
    for c in /sys/class/nvme/nvme*; do
      [ -f $c/subsysnqn ] && [ "$(cat $c/subsysnqn)" = "$1" ] || continue
      for n in $c/nvme*n*; do [ -e "$n" ] || continue; d=$(basename $n | sed 's/c[0-9]*n/n/'); [ -b /dev/$d ] && { echo /dev/$d; return; }; done
    done
    i=$((i+1)); sleep 0.2
  done
}
echo; echo "=== nvme-read-128k: Linux nvme-rdma host, 64 MiB of 128 KiB O_DIRECT reads"
rdisk --rdma verbs target --listen $LAB_IP:4420 --transport rdma --discovery-listen "" --allow-any-host --size 128MiB --fill \
  --iscsi-listen "" --srp-listen "" --admin-socket "" > /tmp/target.log 2>&1 & TPID=$!
i=0; while [ $i -lt 150 ] && ! grep -q 'serving' /tmp/target.log; do i=$((i+1)); sleep 0.2; done
nvme connect -t rdma -a $LAB_IP -s 4420 -n $NQN >/dev/null
d1=$(nvme_dev $NQN)
r1=0; [ -n "$d1" ] && { read_dev $d1 >/dev/null; r1=$(read_dev $d1); }
nvme disconnect -n $NQN >/dev/null
kill -INT $TPID; wait $TPID
modprobe nvmet-rdma
dd if=/dev/urandom of=/tmp/nvmet.img bs=1M count=128 2>/dev/null
L=$(losetup -f); losetup $L /tmp/nvmet.img
mkdir -p $NVMET/subsystems/$KNQN/namespaces/1
echo 1 > $NVMET/subsystems/$KNQN/attr_allow_any_host
printf '%s' $L > $NVMET/subsystems/$KNQN/namespaces/1/device_path
echo 1 > $NVMET/subsystems/$KNQN/namespaces/1/enable
mkdir -p $NVMET/ports/1
echo rdma > $NVMET/ports/1/addr_trtype; echo ipv4 > $NVMET/ports/1/addr_adrfam
echo $LAB_IP > $NVMET/ports/1/addr_traddr; echo 4421 > $NVMET/ports/1/addr_trsvcid
ln -s $NVMET/subsystems/$KNQN $NVMET/ports/1/subsystems/$KNQN
nvme connect -t rdma -a $LAB_IP -s 4421 -n $KNQN >/dev/null
d2=$(nvme_dev $KNQN)
r2=0; [ -n "$d2" ] && { read_dev $d2 >/dev/null; r2=$(read_dev $d2); }
nvme disconnect -n $KNQN >/dev/null
ratio=$(awk -v a=$r1 -v b=$r2 'BEGIN {if (b > 0) printf "%.2f", a / b; else print "0"}')
if [ "$r1" != 0 ] && [ "$r2" != 0 ]; then
  result nvme-read-128k INFO "rdisk target ${r1} MiB/s ($d1), nvmet-rdma ${r2} MiB/s ($d2, loop on tmpfs), ratio=$ratio"
else
  result nvme-read-128k FAIL "rdisk=$r1 nvmet=$r2 ($d1 $d2)"
fi

fi

echo
echo "=== summary ==="
cat $SUMMARY
if [ $failed = 0 ]; then echo "PERF: PASS"; else echo "PERF: FAIL"; fi
exit $failed
