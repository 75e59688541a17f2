#!/bin/sh
# rdisk interop: the rdma conformance suite (rdma/rdmatest) with the
# rdma/verbs provider (libibverbs + librdmacm) on the kernel's rxe and siw,
# inside the RDMA lab guest. Run it through test/interop/run-verbs-conformance.sh;
# it expects in /guest/files (PATH):
#   verbs.test   go test -c -tags verbs ./rdma/verbs (cgo, dynamically linked)
#   lab-net.sh   the lab's helper (LAB_IP, lab_dummy_up); inlined if absent
# Environment (run-guest.sh --env):
#   VERBS_ONLY=rxe|siw   one device only
#   VERBS_RUN=REGEXP     go test -test.run (default TestDevices|TestConformance)
#   VERBS_V=1            -test.v (every subtest's line)
#   VERBS_COUNT=N        -test.count N (repeat the tests, to catch rare failures)
# Output: "VERBS-<dev>-<subtest>: PASS|FAIL|SKIP" lines, "VERBS-<dev>: PASS|FAIL",
# a summary and "VERBS: PASS|FAIL"; exit status 0 only if every device passed.
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
T=$(command -v verbs.test)
echo "VERBS: kernel=$(uname -r) test=$T"
if [ -z "$T" ]; then echo "VERBS: FAIL (verbs.test missing in the guest)"; exit 1; fi
lab_dummy_up
# siw pins registered memory against RLIMIT_MEMLOCK (8 MiB by default) even for root.
ulimit -l unlimited 2>/dev/null || echo "VERBS: cannot raise RLIMIT_MEMLOCK (ulimit -l: $(ulimit -l))"
RUN=${VERBS_RUN:-'TestDevices|TestConformance'}
SUMMARY=/tmp/summary.txt
: > $SUMMARY
failed=0

run_dev() { # NAME TYPE
  name=$1; typ=$2
  echo
  echo "=== $name ($typ on dummy0, $LAB_IP) ==="
  if ! rdma link add $name type $typ netdev dummy0; then
    echo "VERBS-$name: FAIL (rdma link add)" | tee -a $SUMMARY; failed=1; return
  fi
  rdma link show $name/1
  mark=$(dmesg | wc -l); t0=$(date +%s)
  v=; [ -n "${VERBS_V:-}" ] && v=-test.v
  # libibverbs' own error log (the providers' reasons, e.g. libsiw's "QP
  # creation failed" when it returns NULL without errno).
  RDISK_VERBS_IP=$LAB_IP RDISK_VERBS_DEVICE=$name VERBS_LOG_LEVEL=1 VERBS_LOG_FILE=/tmp/verbs-$name.log timeout 600 "$T" -test.run "$RUN" -test.count "${VERBS_COUNT:-1}" -test.v -test.timeout 540s \
    > /tmp/$name.log 2>&1
  rc=$?
  t1=$(date +%s)
  if [ -n "$v" ]; then cat /tmp/$name.log; else grep -Ev '^(=== (RUN|PAUSE|CONT)|    --- PASS)' /tmp/$name.log | grep -v '^--- PASS' | head -300; fi
  # One line per subtest of the suite.
  sed -n 's/^ *--- \(PASS\|FAIL\|SKIP\): TestConformance\/\([^ ]*\) (\(.*\))$/\2 \1 \3/p' /tmp/$name.log | while read -r st res dur; do
    echo "VERBS-$name-$st: $res ($dur)"
  done | tee -a $SUMMARY
  np=$(grep -c -- '--- PASS: TestConformance/' /tmp/$name.log)
  nf=$(grep -c -- '--- FAIL: TestConformance/' /tmp/$name.log)
  ns=$(grep -c -- '--- SKIP: TestConformance/' /tmp/$name.log)
  if [ $rc = 0 ] && grep -q -- '--- PASS: TestConformance ' /tmp/$name.log; then res=PASS; else res=FAIL; failed=1; fi
  line="VERBS-$name: $res subtests pass=$np fail=$nf skip=$ns rc=$rc wall=$((t1 - t0))s"
  echo "$line"; echo "$line" >> $SUMMARY
  if [ $res != PASS ]; then
    echo "--- kernel log since the start of this run (dmesg | tail -40)"
    dmesg | tail -n +$((mark + 1)) | grep -Eiv 'speed is unknown' | tail -40
    [ -s /tmp/verbs-$name.log ] && { echo "--- libibverbs error log (VERBS_LOG_LEVEL=1)"; tail -20 /tmp/verbs-$name.log; }
  fi
  rdma link delete $name
}

[ "${VERBS_ONLY:-rxe}" = rxe ] && run_dev rxe0 rxe
[ "${VERBS_ONLY:-siw}" = siw ] && run_dev siw0 siw

echo
echo "=== summary ==="
cat $SUMMARY
if [ $failed = 0 ]; then echo "VERBS: PASS"; else echo "VERBS: FAIL"; fi
exit $failed
