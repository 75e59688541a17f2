#!/bin/sh
# rdisk interop: the two RDMA providers against each other over iWARP,
# inside the RDMA lab guest. rdisk's target on the verbs provider
# (rdma-core over the kernel's siw) serves rdisk's host tools on the pure-Go
# iWARP provider, and the reverse: rdisk bench --verify over NVMe-oF, iSER
# and SRP in each direction. Both providers speak iWARP (MPA v2, DDP,
# RDMAP) over the guest's kernel TCP: siw's side through its own sockets,
# the pure-Go side through Go's. Run it through test/interop/run-verbs-cross.sh;
# /guest/files (PATH) holds:
#   rdisk        CGO_ENABLED=1 go build -tags verbs ./cmd/rdisk (dynamically linked)
#   lab-net.sh   the lab's helper (LAB_IP, lab_dummy_up); inlined if absent
# Environment (run-guest.sh --env):
#   CROSS_RUNTIME=N   seconds per bench run (default 5)
#   CROSS_ONLY=A|B|M  one direction (A: verbs target <- iwarp host, B: iwarp target <- verbs host,
#                     M: one target serving a port on verbs and a port on iwarp, from --config rdisk_rdma)
#   CROSS_PROTO="nvme iser srp"  the protocols (default all three)
#   CROSS_DEBUG=1     rdisk --log-level debug on both sides
# Direction A has no iSER bench: siw's listener takes the kernel TCP port,
# which iSCSI/TCP holds on the same portal; the case checks the target says
# so (iSCSI/TCP only).
# Output: "CROSS-<dir>-<proto>-<case>: PASS|FAIL ..." lines, a summary and
# "CROSS: PASS|FAIL"; exit status 0 only if every case passed.
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
RT=${CROSS_RUNTIME:-5}
PROTOS=${CROSS_PROTO:-nvme iser srp}
NQN=nqn.2026-11.io.rdisk:default
IQN=iqn.2026-11.io.rdisk:default
IDEXT=0000000000000001
IOC=726469736b000001
LVL=info
[ -n "${CROSS_DEBUG:-}" ] && LVL=debug
SUMMARY=/tmp/summary.txt
: > $SUMMARY
failed=0

echo "CROSS: kernel=$(uname -r) rdisk=$(command -v rdisk) runtime=${RT}s protocols=$PROTOS"
command -v rdisk >/dev/null || { echo "CROSS: FAIL (no rdisk binary in the guest)"; exit 1; }
lab_dummy_up
rdma link add siw0 type siw netdev dummy0 || { echo "CROSS: FAIL (rdma link add siw0)"; exit 1; }
rdma link show siw0/1
# siw pins registered memory against RLIMIT_MEMLOCK (8 MiB by default) even for root.
ulimit -l unlimited 2>/dev/null || echo "CROSS: cannot raise RLIMIT_MEMLOCK (ulimit -l: $(ulimit -l))"
rdisk rdma devices

result() { # NAME PASS|FAIL DETAILS
  line="CROSS-$1: $2 $3"
  echo "$line"; echo "$line" >> $SUMMARY
  [ "$2" = PASS ] || failed=1
}

kernel_log() {
  echo "--- kernel log since the start of this case"
  dmesg | tail -n +$(($1 + 1)) | grep -Eiv 'speed is unknown' | tail -30
}

json_num() {
  sed -n "s/^ *\"$2\": *\([0-9.e+-]*\),*$/\1/p" "$1" | head -1
}

url_of() { # PROTO
  case $1 in
    nvme) echo "nvme://$LAB_IP:4420/$NQN/1" ;;
    iser) echo "iser://$LAB_IP:3260/$IQN/0" ;;
    srp) echo "srp://$LAB_IP:5555/$IDEXT/$IOC/0" ;;
  esac
}

# bench_case NAME HOST_RDMA URL ARGS...
bench_case() {
  name=$1 hr=$2 url=$3; shift 3
  mark=$(dmesg | wc -l)
  echo; echo "=== $name: rdisk --rdma $hr bench $url $* ==="
  t0=$(date +%s)
  rdisk --log-level $LVL --rdma $hr bench "$url" "$@" --json > /tmp/$name.json 2> /tmp/$name.err; rc=$?
  t1=$(date +%s)
  cat /tmp/$name.json; tail -20 /tmp/$name.err
  ios=$(json_num /tmp/$name.json ios); errs=$(json_num /tmp/$name.json errors)
  verrs=$(json_num /tmp/$name.json verify_errors); vblk=$(json_num /tmp/$name.json verified_blocks)
  iops=$(json_num /tmp/$name.json iops); bw=$(json_num /tmp/$name.json bw_bytes_per_sec)
  details="ios=${ios:-0} iops=$(printf '%.0f' ${iops:-0}) MBps=$(echo ${bw:-0} | awk '{printf "%.1f", $1/1e6}') errors=${errs:-?} verify_errors=${verrs:-?} verified_blocks=${vblk:-0} wall=$((t1 - t0))s"
  if [ $rc = 0 ] && [ "${ios:-0}" -gt 0 ] && [ "$errs" = 0 ] && [ "$verrs" = 0 ] && [ "${vblk:-0}" -gt 0 ]; then
    result $name PASS "$details"
  else
    result $name FAIL "rc=$rc $details: $(tail -c 300 /tmp/$name.err)"; kernel_log $mark
  fi
}

# direction DIR TARGET_RDMA HOST_RDMA
direction() {
  dir=$1 tr=$2 hr=$3
  echo; echo "=== direction $dir: rdisk target --rdma $tr <- rdisk host tools --rdma $hr ==="
  mark=$(dmesg | wc -l)
  # NVMe-oF over RDMA only: siw's listener takes the kernel TCP port, so
  # NVMe/TCP cannot share 4420 with it, nor iSCSI/TCP 3260 with iSER.
  rdisk --log-level $LVL --rdma $tr target --listen $LAB_IP:4420 --transport rdma --discovery-listen "" \
    --iscsi-listen $LAB_IP:3260 --srp-listen $LAB_IP:5555 --allow-any-host --size 256MiB --admin-socket "" \
    > /tmp/target-$dir.log 2>&1 &
  tpid=$!
  i=0
  while [ $i -lt 100 ] && ! grep -q 'SRP over RDMA/CM' /tmp/target-$dir.log; do
    kill -0 $tpid 2>/dev/null || break
    i=$((i+1)); sleep 0.2
  done
  cat /tmp/target-$dir.log
  if ! kill -0 $tpid 2>/dev/null; then
    result $dir-target FAIL "rdisk target --rdma $tr exited: $(tail -c 300 /tmp/target-$dir.log)"; kernel_log $mark
    return
  fi
  want=verbs:siw0; [ $tr = iwarp ] && want="software iWARP"
  if grep -q "$want" /tmp/target-$dir.log; then
    result $dir-target PASS "served by $want"
  else
    result $dir-target FAIL "the banner does not name $want"
  fi
  for p in $PROTOS; do
    u=$(url_of $p)
    if [ $p = iser ] && [ $tr = verbs ]; then
      # siw's rdma_listen takes the kernel TCP port, which the target's
      # iSCSI/TCP listener already holds: the portal serves iSCSI/TCP only,
      # and says so. Checked exactly; no iSER bench in this direction.
      if grep -q 'iSER not served beside iSCSI/TCP.*rdma_listen .*:3260: address already in use' /tmp/target-$dir.log &&
         grep -q 'no RDMA device serves this address for iSER' /tmp/target-$dir.log; then
        result $dir-iser-portal PASS "expected on siw: iSCSI/TCP holds 3260, rdma_listen on siw0 gets EADDRINUSE, the portal serves iSCSI/TCP only and its banner says so"
      else
        result $dir-iser-portal FAIL "the target's log does not say why iSER is (not) served on 3260"
      fi
      continue
    fi
    bench_case $dir-$p-randrw $hr "$u" --rw randrw --verify --bs 4KiB --qd 16 --jobs 2 --runtime ${RT}s --size 32MiB
    bench_case $dir-$p-seq-128k $hr "$u" --rw write --verify --bs 128KiB --qd 8 --runtime ${RT}s --size 64MiB
  done
  kill -INT $tpid
  i=0
  while [ $i -lt 100 ] && kill -0 $tpid 2>/dev/null; do i=$((i+1)); sleep 0.2; done
  if kill -0 $tpid 2>/dev/null; then
    result $dir-target-stop FAIL "still running 20 s after SIGINT"; kill -9 $tpid
  else
    wait $tpid; rc=$?
    tail -5 /tmp/target-$dir.log
    if [ $rc = 0 ]; then result $dir-target-stop PASS "exit 0"; else result $dir-target-stop FAIL "exit $rc: $(tail -c 300 /tmp/target-$dir.log)"; fi
  fi
}

# mixed: one target, two NVMe-oF ports with their own providers (the
# configuration's rdisk_rdma): port 1 on the siw address through verbs,
# port 2 on loopback through the software iWARP provider (siw0 does not
# serve 127.0.0.1). The same namespace verified through each.
mixed() {
  echo; echo "=== mixed: one target, port 1 rdisk_rdma verbs ($LAB_IP:4420), port 2 rdisk_rdma iwarp (127.0.0.1:4421) ==="
  mark=$(dmesg | wc -l)
  cat > /tmp/mixed.json <<JSON
{
  "subsystems": [{"nqn": "$NQN", "attr": {"allow_any_host": "1"},
    "namespaces": [{"nsid": 1, "enable": 1, "device": {"path": "ram:256MiB"}}]}],
  "ports": [
    {"portid": 1, "addr": {"trtype": "rdma", "adrfam": "ipv4", "traddr": "$LAB_IP", "trsvcid": "4420"},
     "subsystems": ["$NQN"], "rdisk_rdma": "verbs"},
    {"portid": 2, "addr": {"trtype": "rdma", "adrfam": "ipv4", "traddr": "127.0.0.1", "trsvcid": "4421"},
     "subsystems": ["$NQN"], "rdisk_rdma": "iwarp"}]
}
JSON
  rdisk --log-level $LVL target --config /tmp/mixed.json --discovery-listen "" --admin-socket "" > /tmp/target-M.log 2>&1 &
  tpid=$!
  i=0
  while [ $i -lt 100 ] && [ "$(grep -c 'discover: rdisk discover' /tmp/target-M.log)" -lt 2 ]; do
    kill -0 $tpid 2>/dev/null || break
    i=$((i+1)); sleep 0.2
  done
  cat /tmp/target-M.log
  if ! kill -0 $tpid 2>/dev/null; then
    result M-target FAIL "rdisk target --config (mixed providers) exited: $(tail -c 300 /tmp/target-M.log)"; kernel_log $mark
    return
  fi
  if grep -q "on $LAB_IP:4420 (NVMe-oF/RDMA, verbs:siw0)" /tmp/target-M.log &&
     grep -q "on 127.0.0.1:4421 (NVMe-oF/RDMA, software iWARP)" /tmp/target-M.log; then
    result M-target PASS "port 1 served by verbs:siw0, port 2 by software iWARP, one process"
  else
    result M-target FAIL "the banners do not name verbs:siw0 for port 1 and software iWARP for port 2"
  fi
  bench_case M-nvme-verbs-port iwarp "nvme://$LAB_IP:4420/$NQN/1" --rw randrw --verify --bs 4KiB --qd 16 --jobs 2 --runtime ${RT}s --size 32MiB
  bench_case M-nvme-iwarp-port iwarp "nvme://127.0.0.1:4421/$NQN/1" --rw randrw --verify --bs 4KiB --qd 16 --jobs 2 --runtime ${RT}s --size 32MiB
  kill -INT $tpid
  i=0
  while [ $i -lt 100 ] && kill -0 $tpid 2>/dev/null; do i=$((i+1)); sleep 0.2; done
  if kill -0 $tpid 2>/dev/null; then
    result M-target-stop FAIL "still running 20 s after SIGINT"; kill -9 $tpid
  else
    wait $tpid; rc=$?
    if [ $rc = 0 ]; then result M-target-stop PASS "exit 0"; else result M-target-stop FAIL "exit $rc: $(tail -c 300 /tmp/target-M.log)"; fi
  fi
}

[ "${CROSS_ONLY:-A}" = A ] && direction A verbs iwarp
[ "${CROSS_ONLY:-B}" = B ] && direction B iwarp verbs
[ "${CROSS_ONLY:-M}" = M ] && mixed

echo
echo "=== summary ==="
cat $SUMMARY
if [ $failed = 0 ]; then echo "CROSS: PASS"; else echo "CROSS: FAIL"; fi
exit $failed
