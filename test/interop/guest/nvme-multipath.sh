#!/bin/sh
# rdisk interop: Linux native NVMe multipath (nvme_core multipath, built
# into Debian's kernel) over two rdisk targets ("gateways") inside the lab
# guest that export one file-backed disk under one subsystem NQN, with
# distinct controller-ID ranges and ANA groups: gateway A optimized,
# gateway B non-optimized. Checks: nvme list-subsys shows two live paths
# with their ANA states; O_DIRECT dd keeps verifying while A is killed
# with SIGKILL (I/O moves to B) and restarted (it comes back optimized);
# an ANA change by `rdisk admin` (A inaccessible) moves I/O to B, and back.
# Run it through test/interop/run-nvme-multipath.sh; /guest/files (on PATH)
# holds `rdisk` (CGO_ENABLED=0) and the lab's lab-net.sh.
# Output: NVME-MULTIPATH-<step>: PASS|FAIL lines and NVME-MULTIPATH: PASS|FAIL.
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
NQN=nqn.2026-11.io.rdisk:shared
TR=${NVME_TRANSPORT:-tcp}
fails=0
step() { # step NAME RC
  if [ "$2" = 0 ]; then echo "NVME-MULTIPATH-$1: PASS"; else echo "NVME-MULTIPATH-$1: FAIL (rc=$2)"; fails=$((fails+1)); fi
}
waitfor() { # waitfor SECONDS CMD...
  n=$(($1*5)); shift
  while [ $n -gt 0 ]; do "$@" && return 0; n=$((n-1)); sleep 0.2; done
  return 1
}
lab_dummy_up
if [ "$TR" = rdma ]; then
  rdma link add siw0 type siw netdev dummy0 || { echo "NVME-MULTIPATH: FAIL (rdma link add)"; exit 1; }
else
  modprobe nvme-tcp || { echo "NVME-MULTIPATH: FAIL (modprobe nvme-tcp)"; exit 1; }
fi
echo "nvme_core multipath: $(cat /sys/module/nvme_core/parameters/multipath 2>/dev/null)"
truncate -s 128M /tmp/shared.img

# gateway NAME PORT CNTLID_MIN CNTLID_MAX STATE: one target's config.
gateway() {
  cat > /tmp/$1.json <<JSON
{
  "hosts": [],
  "ports": [{"portid": 1, "addr": {"adrfam": "ipv4", "traddr": "$LAB_IP", "trsvcid": "$2", "trtype": "$TR"},
             "ana_groups": [{"grpid": 1, "ana": {"state": "$5"}}],
             "subsystems": ["$NQN"]}],
  "subsystems": [{"nqn": "$NQN", "attr": {"allow_any_host": "1", "serial": "rdiskshared0001", "cntlid_min": "$3", "cntlid_max": "$4"},
                  "allowed_hosts": [],
                  "namespaces": [{"nsid": 1, "enable": 1, "rdisk_shared": true, "device": {"path": "/tmp/shared.img"}, "ana": {"grpid": "1"}}]}]
}
JSON
}
gateway a 4420 1 99 optimized
gateway b 4421 100 199 non-optimized
start() { # start NAME
  rdisk --log-level "${RDISK_LOG_LEVEL:-info}" target --config /tmp/$1.json --admin-socket /tmp/$1.sock >> /tmp/$1.log 2>&1 &
  echo $! > /tmp/$1.pid
  waitfor 10 test -S /tmp/$1.sock
}
start a; step start-a $?
start b; step start-b $?
cat /tmp/a.log /tmp/b.log

nvme connect -t $TR -a $LAB_IP -s 4420 -n $NQN; step connect-a $?
nvme connect -t $TR -a $LAB_IP -s 4421 -n $NQN; step connect-b $?
sub=$(for s in /sys/class/nvme-subsystem/*; do [ "$(cat $s/subsysnqn)" = "$NQN" ] && echo $s; done | head -1)
echo "subsystem: $sub"
nvme list-subsys; nvme list-subsys | tee /tmp/ls
[ "$(grep -c ' live' /tmp/ls)" = 2 ]; step two-live-paths $?
dev=
waitfor 10 sh -c "ls $sub/ | grep -q 'nvme[0-9]*n1'" && dev=/dev/$(ls $sub/ | grep 'nvme[0-9]*n1$' | head -1)
[ -b "$dev" ]; step multipath-head $?
echo "multipath device: $dev, iopolicy $(cat $sub/iopolicy 2>/dev/null)"
# pathof ADDR_PORT: the path's block device (nvmeXcYnZ) of the controller
# connected to that service id.
ctrlof() { for c in $sub/nvme*; do [ -f $c/address ] && grep -q "trsvcid=$1" $c/address && basename $c; done | head -1; }
pathof() { c=$(ctrlof $1); [ -n "$c" ] && ls -d /sys/block/nvme*c*n1 2>/dev/null | while read p; do [ -e $p/device ] && [ "$(basename $(readlink -f $p/device))" = "$c" ] && basename $p; done | head -1; }
states() { for p in /sys/block/nvme*c*n1; do [ -f $p/ana_state ] && echo "$(basename $p) $(cat $p/ana_state)"; done; }
pa=$(pathof 4420) pb=$(pathof 4421)
echo "path A: $pa, path B: $pb"; states
[ "$(cat /sys/block/$pa/ana_state 2>/dev/null)" = optimized ]; step ana-a-optimized $?
[ "$(cat /sys/block/$pb/ana_state 2>/dev/null)" = non-optimized ]; step ana-b-non-optimized $?
# reads of a path (sectors, /sys/block/P/stat field 3)
rd() { awk '{print $3}' /sys/block/$1/stat; }

dd if=/dev/urandom of=/tmp/pattern bs=1M count=16 2>/dev/null
dd if=/tmp/pattern of=$dev bs=1M count=16 oflag=direct conv=fsync; step write-16MiB $?
# The verify loop: read the 16 MiB back with O_DIRECT and compare, again
# and again, until /tmp/stop exists; every failure is counted.
rm -f /tmp/stop /tmp/verify.fail /tmp/verify.ok
(
  while [ ! -f /tmp/stop ]; do
    if dd if=$dev of=/tmp/rb bs=1M count=16 iflag=direct 2>/dev/null && cmp -s /tmp/pattern /tmp/rb; then
      echo . >> /tmp/verify.ok
    else
      echo "$(cut -d' ' -f1 /proc/uptime)" >> /tmp/verify.fail
    fi
  done
) &
VPID=$!
sleep 3
a0=$(rd $pa) b0=$(rd $pb)
sleep 3
a1=$(rd $pa) b1=$(rd $pb)
echo "reads while both live: A +$((a1-a0)) sectors, B +$((b1-b0))"
[ $((a1-a0)) -gt 0 ] && [ $((b1-b0)) = 0 ]; step io-on-optimized-path $?

t0=$(cut -d' ' -f1 /proc/uptime)
kill -9 $(cat /tmp/a.pid); step kill-a $?
sleep 8
b2=$(rd $pb)
echo "after SIGKILL of A: B +$((b2-b1)) sectors"; states; nvme list-subsys
[ $((b2-b1)) -gt 0 ]; step io-moved-to-b $?
start a; step restart-a $?
waitfor 30 sh -c "[ \"\$(cat /sys/block/$pa/ana_state 2>/dev/null)\" = optimized ] && nvme list-subsys | grep -q 'trsvcid=4420.* live'"; step a-back-optimized $?
t1=$(cut -d' ' -f1 /proc/uptime)
echo "A gone and back in $(echo "$t0 $t1" | awk '{printf "%.1f", $2-$1}') s"; states
sleep 3
a3=$(rd $pa); sleep 3; a4=$(rd $pa)
[ $((a4-a3)) -gt 0 ]; step io-back-on-a $?

rdisk admin --socket /tmp/a.sock ana set 1 1 inaccessible; step admin-a-inaccessible $?
waitfor 10 sh -c "[ \"\$(cat /sys/block/$pa/ana_state)\" = inaccessible ]"; step host-sees-inaccessible $?
states
b5=$(rd $pb); a5=$(rd $pa); sleep 3; b6=$(rd $pb); a6=$(rd $pa)
echo "A inaccessible: A +$((a6-a5)) B +$((b6-b5)) sectors"
[ $((b6-b5)) -gt 0 ] && [ $((a6-a5)) = 0 ]; step io-follows-ana-change $?
rdisk admin --socket /tmp/a.sock ana set 1 1 optimized; step admin-a-optimized $?
waitfor 10 sh -c "[ \"\$(cat /sys/block/$pa/ana_state)\" = optimized ]"; step host-sees-optimized $?
rdisk admin --socket /tmp/a.sock status | head -30

touch /tmp/stop; wait $VPID
ok=$(wc -l < /tmp/verify.ok 2>/dev/null || echo 0)
bad=$(cat /tmp/verify.fail 2>/dev/null | wc -l)
echo "verify passes: $ok good, $bad failed $(cat /tmp/verify.fail 2>/dev/null | tr '\n' ' ')"
[ "$bad" = 0 ] && [ "$ok" -gt 0 ]; step verify-throughout $?

nvme disconnect -n $NQN; step disconnect $?
kill $(cat /tmp/a.pid) $(cat /tmp/b.pid) 2>/dev/null
echo "--- gateway A log"; tail -20 /tmp/a.log
echo "--- gateway B log"; tail -20 /tmp/b.log
echo "--- kernel log"; dmesg | grep -Ei 'nvme|ana' | tail -40
echo "=== summary ==="
if [ $fails = 0 ]; then echo "NVME-MULTIPATH: PASS"; exit 0; fi
echo "NVME-MULTIPATH: FAIL ($fails steps)"
exit 1
