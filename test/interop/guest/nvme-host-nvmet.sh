#!/bin/sh
# rdisk interop: rdisk's NVMe-oF host (nvmeof/host over the pure-Go iWARP
# provider, or over NVMe/TCP) against the Linux kernel's NVMe-oF target
# (nvmet-rdma over siw, or nvmet-tcp), inside the RDMA lab guest. Run it through test/interop/run-nvme-host.sh; it
# expects in /guest/files (PATH):
#   rdisk        the rdisk binary, CGO_ENABLED=0
#   lab-net.sh   the lab's helper (LAB_IP, lab_dummy_up); inlined if absent
# Environment (run-guest.sh --env):
#   NVME_HOST_RUNTIME   seconds per bench run (default 5)
#   NVME_HOST_DEBUG=1   rdisk --log-level debug
#   NVME_HOST_TRANSPORT=tcp  nvmet-tcp and nvme+tcp:// URLs instead of RDMA
#   NVME_HOST_DIGEST=1  with tcp: header and data digests (--hdr-digest --data-digest)
#
# nvmet exports a 64 MiB RAM-backed namespace (a loop device over a file in
# the guest's RAM root) as nsid 1 of $NQN on $LAB_IP:4420 (rdma). Then:
#   discover     rdisk discover (text and --json)
#   identify     rdisk nvme identify URL/1
#   list         rdisk nvme list URL
#   smart-log    rdisk nvme smart-log URL
#   randrw       rdisk bench --rw randrw --verify, 4 KiB (in-capsule writes), 2 jobs
#   seq-128k     rdisk bench --rw write --verify, 128 KiB (keyed SGL writes)
#   randwrite-16k rdisk bench --rw randwrite --verify, 16 KiB, 4 jobs
#   backing      a write run with a fixed seed, read back by a read-only
#                --verify run, and the verify header checked on the loop device
#   randread     rdisk bench --rw randread 4 KiB QD32 (performance figure)
#   wrong-nqn    connect to a subsystem that does not exist: one clear error
#   ns-add       enable nsid 2 while a bench runs (namespace-changed AEN),
#                then rdisk nvme list shows both namespaces
# Output: "NVME-HOST-<case>: PASS|FAIL ..." lines, a summary, and
# "NVME-HOST: PASS|FAIL"; exit status 0 only if every case passed.
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

RT=${NVME_HOST_RUNTIME:-5}
NQN=nqn.2026-11.io.rdisk:nvmet-interop
PORT=4420
TR=${NVME_HOST_TRANSPORT:-rdma}
SCHEME=nvme
DG=
if [ "$TR" = tcp ]; then
  SCHEME=nvme+tcp
  [ "${NVME_HOST_DIGEST:-0}" = 1 ] && DG="--hdr-digest --data-digest"
fi
BASE=$SCHEME://$LAB_IP:$PORT
URL=$BASE/$NQN
NVMET=/sys/kernel/config/nvmet
RDISK="rdisk"
[ -n "${NVME_HOST_DEBUG:-}" ] && RDISK="rdisk --log-level debug"
SUMMARY=/tmp/summary.txt
: > $SUMMARY
failed=0

echo "NVME-HOST: kernel=$(uname -r) rdisk=$(command -v rdisk) runtime=${RT}s transport=$TR digests=${DG:-none}"
if ! command -v rdisk >/dev/null; then
  echo "NVME-HOST: FAIL (no rdisk binary in the guest)"
  exit 1
fi

result() { # NAME PASS|FAIL DETAILS
  line="NVME-HOST-$1: $2 $3"
  echo "$line"; echo "$line" >> $SUMMARY
  [ "$2" = PASS ] || failed=1
}

kernel_log() {
  echo "--- kernel log since the start of this case"
  dmesg | tail -n +$(($1 + 1)) | grep -Eiv 'speed is unknown' | tail -40
}

# json_num FILE KEY: the first numeric value of "KEY": in a JSON file.
json_num() {
  sed -n "s/^ *\"$2\": *\([0-9.e+-]*\),*$/\1/p" "$1" | head -1
}

# --- setup: siw on dummy0, nvmet-rdma with a RAM-backed namespace
lab_dummy_up
if [ "$TR" = rdma ]; then
  rdma link add siw0 type siw netdev dummy0 || { echo "NVME-HOST: FAIL (rdma link add siw0)"; exit 1; }
fi
modprobe nvmet-$TR
[ -d $NVMET ] || { echo "NVME-HOST: FAIL (no nvmet configfs)"; exit 1; }
dd if=/dev/zero of=/tmp/ns1.img bs=1M count=64 2>/dev/null
dd if=/dev/zero of=/tmp/ns2.img bs=1M count=16 2>/dev/null
# busybox losetup: no --show; take the first two free devices explicitly.
LOOP1=$(losetup -f); losetup $LOOP1 /tmp/ns1.img || { echo "NVME-HOST: FAIL (losetup $LOOP1)"; exit 1; }
LOOP2=$(losetup -f); losetup $LOOP2 /tmp/ns2.img || { echo "NVME-HOST: FAIL (losetup $LOOP2)"; exit 1; }
mkdir -p $NVMET/subsystems/$NQN
echo 1 > $NVMET/subsystems/$NQN/attr_allow_any_host
mkdir -p $NVMET/subsystems/$NQN/namespaces/1
printf '%s' "$LOOP1" > $NVMET/subsystems/$NQN/namespaces/1/device_path
echo 1 > $NVMET/subsystems/$NQN/namespaces/1/enable
mkdir -p $NVMET/ports/1
echo $TR > $NVMET/ports/1/addr_trtype
echo ipv4 > $NVMET/ports/1/addr_adrfam
echo $LAB_IP > $NVMET/ports/1/addr_traddr
echo $PORT > $NVMET/ports/1/addr_trsvcid
ln -s $NVMET/subsystems/$NQN $NVMET/ports/1/subsystems/$NQN
echo "NVME-HOST: nvmet-$TR on $LAB_IP:$PORT, $NQN nsid 1 = $LOOP1 (64 MiB), inline_data_size=$(cat $NVMET/ports/1/param_inline_data_size 2>/dev/null)"
dmesg | grep -E 'nvmet' | tail -3

# --- discover
mark=$(dmesg | wc -l)
echo; echo "=== discover: $RDISK discover $BASE ==="
$RDISK discover --timeout 30s $BASE $DG > /tmp/disc.out 2> /tmp/disc.err; rc=$?
cat /tmp/disc.out /tmp/disc.err
$RDISK discover --timeout 30s $BASE $DG --json > /tmp/disc.json 2>> /tmp/disc.err; rcj=$?
cat /tmp/disc.json
n=$(sed -n 's/^Discovery Log Number of Records \([0-9]*\),.*/\1/p' /tmp/disc.out)
if [ $rc = 0 ] && [ $rcj = 0 ] && grep -q "^subnqn:  $NQN\$" /tmp/disc.out && grep -q "^traddr:  $LAB_IP\$" /tmp/disc.out \
   && grep -q "\"subnqn\": \"$NQN\"" /tmp/disc.json && grep -q "^url:     $URL\$" /tmp/disc.out; then
  result discover PASS "records=$n subnqn=$NQN url=$URL"
else
  result discover FAIL "rc=$rc json_rc=$rcj records=${n:-?}: $(head -c 300 /tmp/disc.err)"; kernel_log $mark
fi

# --- identify
mark=$(dmesg | wc -l)
echo; echo "=== identify: $RDISK nvme identify $URL/1 $DG ==="
$RDISK nvme identify $URL/1 $DG > /tmp/id.out 2> /tmp/id.err; rc=$?
cat /tmp/id.out /tmp/id.err
mn=$(sed -n 's/^mn *: *//p' /tmp/id.out | sed 's/ *$//')
mdts=$(sed -n 's/^mdts *: *//p' /tmp/id.out)
ioccsz=$(sed -n 's/^ioccsz *: *//p' /tmp/id.out)
nsze=$(sed -n 's/^nsze *: *//p' /tmp/id.out)
if [ $rc = 0 ] && grep -q "^subnqn *: $NQN\$" /tmp/id.out && [ "$nsze" = 0x20000 ]; then
  result identify PASS "mn='$mn' mdts=$mdts ioccsz=$ioccsz nsze=$nsze"
else
  result identify FAIL "rc=$rc nsze=${nsze:-?}: $(head -c 300 /tmp/id.err)"; kernel_log $mark
fi

# --- list
mark=$(dmesg | wc -l)
echo; echo "=== list: $RDISK nvme list $URL ==="
$RDISK nvme list $URL $DG > /tmp/list.out 2> /tmp/list.err; rc=$?
cat /tmp/list.out /tmp/list.err
if [ $rc = 0 ] && grep -q "^$URL/1 " /tmp/list.out; then
  result list PASS "$(grep -c "^$URL/" /tmp/list.out) namespace(s)"
else
  result list FAIL "rc=$rc: $(head -c 300 /tmp/list.err)"; kernel_log $mark
fi

# --- smart-log
mark=$(dmesg | wc -l)
echo; echo "=== smart-log: $RDISK nvme smart-log $URL $DG ==="
$RDISK nvme smart-log $URL $DG > /tmp/smart.out 2> /tmp/smart.err; rc=$?
cat /tmp/smart.out /tmp/smart.err
if [ $rc = 0 ] && grep -q '^critical_warning *: 0' /tmp/smart.out; then
  result smart-log PASS "$(grep -E '^(host_read_commands|host_write_commands)' /tmp/smart.out | tr -s ' ' | tr '\n' ' ')"
else
  result smart-log FAIL "rc=$rc: $(head -c 300 /tmp/smart.err)"; kernel_log $mark
fi

# bench_case NAME ARGS...: a bench run that must end with no I/O or verify
# errors.
bench_case() {
  name=$1; shift
  mark=$(dmesg | wc -l)
  echo; echo "=== $name: $RDISK bench $URL/1 $* --json ==="
  t0=$(date +%s)
  $RDISK bench $URL/1 "$@" $DG --json > /tmp/$name.json 2> /tmp/$name.err; rc=$?
  t1=$(date +%s)
  cat /tmp/$name.json; cat /tmp/$name.err
  ios=$(json_num /tmp/$name.json ios); errs=$(json_num /tmp/$name.json errors)
  verrs=$(json_num /tmp/$name.json verify_errors); vblk=$(json_num /tmp/$name.json verified_blocks)
  iops=$(json_num /tmp/$name.json iops); bw=$(json_num /tmp/$name.json bw_bytes_per_sec)
  p50=$(json_num /tmp/$name.json p50); p99=$(json_num /tmp/$name.json p99)
  details="ios=${ios:-0} iops=$(printf '%.0f' ${iops:-0}) MBps=$(echo ${bw:-0} | awk '{printf "%.1f", $1/1e6}') p50_us=$(printf '%.0f' ${p50:-0}) p99_us=$(printf '%.0f' ${p99:-0}) errors=${errs:-?} verify_errors=${verrs:-?} verified_blocks=${vblk:-0} wall=$((t1 - t0))s"
  if [ $rc = 0 ] && [ "${ios:-0}" -gt 0 ] && [ "$errs" = 0 ] && [ "$verrs" = 0 ]; then
    result $name PASS "$details"
  else
    result $name FAIL "rc=$rc $details: $(tail -c 300 /tmp/$name.err)"; kernel_log $mark
  fi
}

bench_case randrw --rw randrw --verify --bs 4KiB --qd 16 --jobs 2 --runtime ${RT}s --size 32MiB
bench_case seq-128k --rw write --verify --bs 128KiB --qd 8 --runtime ${RT}s --size 32MiB
bench_case randwrite-16k --rw randwrite --verify --bs 16KiB --qd 8 --jobs 4 --runtime ${RT}s --size 64MiB

# --- the data is on the target's backing store: a write run with a fixed
# seed, a read-only verify run of it, and the header on the loop device.
mark=$(dmesg | wc -l)
echo; echo "=== backing: write 4 MiB with seed 7, verify it read-only, check $LOOP1 ==="
$RDISK bench $URL/1 --rw write --verify --bs 64KiB --qd 4 --size 4MiB --runtime 1s --seed 7 -q $DG > /tmp/bw.out 2>&1; rc1=$?
$RDISK bench $URL/1 --rw read --verify --bs 64KiB --qd 4 --size 4MiB --runtime 1s --seed 7 -q $DG > /tmp/br.out 2>&1; rc2=$?
$RDISK bench $URL/1 --rw read --verify --bs 64KiB --qd 4 --size 4MiB --runtime 1s --seed 8 -q $DG > /tmp/bx.out 2>&1; rc3=$?
cat /tmp/bw.out /tmp/br.out; tail -5 /tmp/bx.out
echo 3 > /proc/sys/vm/drop_caches
magic=$(dd if=$LOOP1 bs=512 count=1 skip=4096 iflag=direct 2>/dev/null | head -c 8)
lba=$(dd if=$LOOP1 bs=512 count=1 skip=4096 iflag=direct 2>/dev/null | od -An -tu8 -j8 -N8 | tr -d ' ')
if [ $rc1 = 0 ] && [ $rc2 = 0 ] && [ $rc3 != 0 ] && grep -q 'another run' /tmp/bx.out && [ "$magic" = RDSKVRFY ] && [ "$lba" = 4096 ]; then
  result backing PASS "seed-7 write+read-only verify ok, seed-8 verify refused as expected, $LOOP1 LBA 4096 holds magic=$magic lba=$lba"
else
  result backing FAIL "write_rc=$rc1 verify_rc=$rc2 wrong_seed_rc=$rc3 magic='$magic' lba='$lba'"; kernel_log $mark
fi

bench_case randread --rw randread --bs 4KiB --qd 32 --runtime ${RT}s

# --- wrong subsystem NQN
mark=$(dmesg | wc -l)
echo; echo "=== wrong-nqn: $RDISK nvme list $BASE/nqn.2026-11.io.rdisk:does-not-exist $DG ==="
$RDISK nvme list $BASE/nqn.2026-11.io.rdisk:does-not-exist $DG > /tmp/wrong.out 2> /tmp/wrong.err; rc=$?
cat /tmp/wrong.out /tmp/wrong.err
if [ $rc != 0 ] && [ "$(wc -l < /tmp/wrong.err)" = 1 ] && grep -q 'subsystem NQN not found' /tmp/wrong.err; then
  result wrong-nqn PASS "$(cat /tmp/wrong.err)"
else
  result wrong-nqn FAIL "rc=$rc: $(head -c 300 /tmp/wrong.err)"; kernel_log $mark
fi

# --- namespace added while connected: the AEN, then list shows it
mark=$(dmesg | wc -l)
echo; echo "=== ns-add: enable nsid 2 during a bench run ==="
rdisk --log-level info bench $URL/1 --rw randread --qd 4 --runtime 4s -q $DG > /tmp/nsadd.out 2> /tmp/nsadd.err & bpid=$!
sleep 2
mkdir -p $NVMET/subsystems/$NQN/namespaces/2
printf '%s' "$LOOP2" > $NVMET/subsystems/$NQN/namespaces/2/device_path
echo 1 > $NVMET/subsystems/$NQN/namespaces/2/enable
wait $bpid; rcb=$?
cat /tmp/nsadd.out /tmp/nsadd.err
$RDISK nvme list $URL $DG > /tmp/list2.out 2>&1; rc=$?
cat /tmp/list2.out
if [ $rcb = 0 ] && [ $rc = 0 ] && grep -q "^$URL/2 " /tmp/list2.out && grep -q 'asynchronous event' /tmp/nsadd.err; then
  result ns-add PASS "AEN seen by the running host ($(grep -o 'namespaces=[^ ]*' /tmp/nsadd.err | head -1)); list shows nsid 2"
else
  result ns-add FAIL "bench_rc=$rcb list_rc=$rc aen=$(grep -c 'asynchronous event' /tmp/nsadd.err)"; kernel_log $mark
fi

echo; echo "--- kernel log (nvmet)"; dmesg | grep -E 'nvmet|nvme' | tail -25
echo
echo "=== summary ==="
cat $SUMMARY
if [ $failed = 0 ]; then echo "NVME-HOST: PASS"; else echo "NVME-HOST: FAIL"; fi
exit $failed
