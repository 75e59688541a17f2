#!/bin/sh
# rdisk interop: our Go rping (rdisk rdma API + pure-Go iWARP provider) against
# rdma-core's rping over the Linux kernel's siw, inside the RDMA lab guest.
# Run it through test/interop/run-rping.sh; it expects in /guest/files (PATH):
#   rping-go     our rping, CGO_ENABLED=0 (test/interop/rping)
#   lab-net.sh   the lab's helper (LAB_IP, lab_dummy_up); inlined if absent
# Environment (run-guest.sh --env):
#   RPING_COUNT (20), RPING_SIZE (64)   the acceptance case
#   RPING_MATRIX=1     also run: 65535 B x 10, CRC 4096 B x 10, CRC 65535 B x 5
#   RPING_HEXDUMP=1    our side logs every MPA frame / FPDU
#   RPING_DEBUG=1      debug logging on our side
#   RPING_SIW_DEBUG=1  siw dynamic debug into dmesg
#   RPING_ONLY=a|b     run one direction
#
# Per case:
#  (a) kernel `rping -s -v` server  <-  our client  (-C N -V)
#  (b) our server (-C N -V)         <-  kernel `rping -c -V -v` client
# Output: "RPING-SIW-<case>-A|B ...: PASS|FAIL ..." lines, a summary, and
# "RPING-SIW: PASS|FAIL"; exit status 0 only if every run passed.
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

COUNT=${RPING_COUNT:-20}
SIZE=${RPING_SIZE:-64}
BASEFLAGS=
[ -n "${RPING_HEXDUMP:-}" ] && BASEFLAGS=-hexdump
[ -n "${RPING_DEBUG:-}" ] && BASEFLAGS="$BASEFLAGS -d"
KRPING=$(command -v rping)
GORPING=$(command -v rping-go)
echo "RPING-SIW: count=$COUNT size=$SIZE matrix=${RPING_MATRIX:-0} kernel-rping=$KRPING go-rping=$GORPING flags='$BASEFLAGS' kernel=$(uname -r)"
if [ -z "$KRPING" ] || [ -z "$GORPING" ]; then
  echo "RPING-SIW: FAIL (missing rping or rping-go in the guest)"
  exit 1
fi

lab_dummy_up
rdma link add siw0 type siw netdev dummy0 || { echo "RPING-SIW: FAIL (rdma link add siw0)"; exit 1; }
rdma link show siw0/1

if [ -n "${RPING_SIW_DEBUG:-}" ]; then
  mount -t debugfs none /sys/kernel/debug 2>/dev/null
  if echo 'module siw +p' > /sys/kernel/debug/dynamic_debug/control 2>/dev/null; then
    echo "RPING-SIW: siw dynamic debug on"
  else
    echo "RPING-SIW: siw dynamic debug not available"
  fi
fi

# wait_pid PID SECONDS: wait for a background job, killing it after SECONDS.
# Sets WAIT_RC to its exit status (124 on timeout).
wait_pid() {
  _p=$1; _t=$2; _i=0
  while kill -0 "$_p" 2>/dev/null; do
    _i=$((_i + 1))
    if [ $_i -gt $((_t * 10)) ]; then
      echo "RPING-SIW: pid $_p still running after ${_t}s, killing it"
      kill "$_p" 2>/dev/null; sleep 0.5; kill -9 "$_p" 2>/dev/null
      wait "$_p" 2>/dev/null
      WAIT_RC=124
      return
    fi
    sleep 0.1
  done
  wait "$_p"; WAIT_RC=$?
}

# wait_file_grep FILE PATTERN SECONDS
wait_file_grep() {
  _i=0
  while ! grep -q "$2" "$1" 2>/dev/null; do
    _i=$((_i + 1)); [ $_i -gt $(($3 * 10)) ] && return 1
    sleep 0.1
  done
}

kernel_log() {
  echo "--- kernel log since the start of this run (dmesg | tail -60)"
  dmesg | tail -n +$(($1 + 1)) | grep -Eiv 'speed is unknown' | tail -60
}

SUMMARY=/tmp/summary.txt
: > $SUMMARY
failed=0
port=7174

# run_case NAME COUNT SIZE EXTRA_GO_FLAGS
run_case() {
  name=$1; n=$2; sz=$3; flags="$BASEFLAGS $4"
  pa=$port; pb=$((port + 1)); port=$((port + 2))

  if [ "${RPING_ONLY:-a}" = a ]; then
    echo
    echo "=== $name (a): kernel rping -s  <-  Go rping -c $flags  ($LAB_IP:$pa, $n x $sz B, -V) ==="
    mark=$(dmesg | wc -l); t0=$(date +%s)
    $KRPING -s -a $LAB_IP -p $pa -C $n -S $sz -v > /tmp/$name-a-kernel-server.log 2>&1 & ksrv=$!
    sleep 1
    timeout 150 rping-go -c -a $LAB_IP -p $pa -C $n -S $sz -V $flags > /tmp/$name-a-go-client.out 2> /tmp/$name-a-go-client.err
    go_rc=$?
    wait_pid $ksrv 20; k_rc=$WAIT_RC
    t1=$(date +%s)
    echo "--- Go client stdout (rc=$go_rc)"; cat /tmp/$name-a-go-client.out
    echo "--- Go client log"; cat /tmp/$name-a-go-client.err
    echo "--- kernel rping server (rc=$k_rc)"; cut -c1-100 /tmp/$name-a-kernel-server.log
    k_iter=$(grep -c '^server ping data: ' /tmp/$name-a-kernel-server.log)
    go_iter=$(sed -n 's/.*RPING-GO client: .* iterations=\([0-9]*\).*/\1/p' /tmp/$name-a-go-client.out)
    go_bytes=$(sed -n 's/.*RPING-GO client: .* bytes_verified=\([0-9]*\).*/\1/p' /tmp/$name-a-go-client.out)
    if [ "$go_rc" = 0 ] && [ "$k_rc" = 0 ] && [ "${go_iter:-0}" = "$n" ] && [ "$k_iter" = "$n" ] \
       && grep -q 'RPING-GO client: PASS' /tmp/$name-a-go-client.out; then
      res=PASS
    else
      res=FAIL; failed=1
    fi
    line="RPING-SIW-$name-A (kernel rping -s <- Go client, $sz B$4): $res go-client-iterations=${go_iter:-0}/$n kernel-server-reads=$k_iter bytes_verified=${go_bytes:-0} go_rc=$go_rc kernel_rc=$k_rc wall=$((t1 - t0))s"
    echo "$line"; echo "$line" >> $SUMMARY
    [ $res = PASS ] && [ -z "${RPING_SIW_DEBUG:-}" ] || kernel_log $mark
  fi

  if [ "${RPING_ONLY:-b}" = b ]; then
    echo
    echo "=== $name (b): Go rping -s $flags  <-  kernel rping -c -V -v  ($LAB_IP:$pb, $n x $sz B) ==="
    mark=$(dmesg | wc -l); t0=$(date +%s)
    rping-go -s -a $LAB_IP -p $pb -C $n -V $flags -timeout 180s > /tmp/$name-b-go-server.out 2> /tmp/$name-b-go-server.err & gsrv=$!
    wait_file_grep /tmp/$name-b-go-server.err 'msg=listening' 10 || echo "RPING-SIW: Go server did not report listening within 10s"
    timeout 150 $KRPING -c -a $LAB_IP -p $pb -C $n -S $sz -V -v > /tmp/$name-b-kernel-client.log 2>&1
    k_rc=$?
    wait_pid $gsrv 20; go_rc=$WAIT_RC
    t1=$(date +%s)
    echo "--- kernel rping client (rc=$k_rc)"; cut -c1-100 /tmp/$name-b-kernel-client.log
    echo "--- Go server stdout (rc=$go_rc)"; cat /tmp/$name-b-go-server.out
    echo "--- Go server log"; cat /tmp/$name-b-go-server.err
    k_iter=$(grep -c '^ping data: ' /tmp/$name-b-kernel-client.log)
    go_iter=$(sed -n 's/.*RPING-GO server: .* iterations=\([0-9]*\).*/\1/p' /tmp/$name-b-go-server.out)
    go_bytes=$(sed -n 's/.*RPING-GO server: .* bytes_verified=\([0-9]*\).*/\1/p' /tmp/$name-b-go-server.out)
    if [ "$k_rc" = 0 ] && [ "$go_rc" = 0 ] && [ "$k_iter" = "$n" ] && [ "${go_iter:-0}" = "$n" ] \
       && ! grep -q 'data mismatch' /tmp/$name-b-kernel-client.log && grep -q 'RPING-GO server: PASS' /tmp/$name-b-go-server.out; then
      res=PASS
    else
      res=FAIL; failed=1
    fi
    line="RPING-SIW-$name-B (Go server <- kernel rping -c -V, $sz B$4): $res kernel-client-verified-pings=$k_iter/$n go-server-iterations=${go_iter:-0} go-server-bytes_verified=${go_bytes:-0} kernel_rc=$k_rc go_rc=$go_rc wall=$((t1 - t0))s"
    echo "$line"; echo "$line" >> $SUMMARY
    [ $res = PASS ] && [ -z "${RPING_SIW_DEBUG:-}" ] || kernel_log $mark
  fi
}

run_case default "$COUNT" "$SIZE" ""
if [ -n "${RPING_MATRIX:-}" ]; then
  run_case max 10 65535 ""
  run_case crc 10 4096 " -crc"
  run_case crc-max 5 65535 " -crc"
fi

echo
echo "=== summary ==="
cat $SUMMARY
if [ $failed = 0 ]; then echo "RPING-SIW: PASS"; else echo "RPING-SIW: FAIL"; fi
exit $failed
