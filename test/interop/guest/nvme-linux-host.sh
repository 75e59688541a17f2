#!/bin/sh
# rdisk interop: the Linux kernel's NVMe-oF host (nvme-cli; nvme-rdma over
# siw, or nvme-tcp with NVME_TRANSPORT=tcp, header and data digests with
# NVME_DIGEST=1) against rdisk's NVMe-oF target (pure-Go iWARP and NVMe/TCP
# on one port), inside the lab guest.
# Run it through test/interop/run-nvme-linux-host.sh; /guest/files (on PATH)
# holds `rdisk` (CGO_ENABLED=0) and the lab's lab-net.sh.
# Output: NVME-LINUX-HOST-<step>: PASS|FAIL lines and NVME-LINUX-HOST: PASS|FAIL.
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
NQN=nqn.2026-11.io.rdisk:default
MB=${NVME_MB:-64}
fails=0
step() { # step NAME RC
  if [ "$2" = 0 ]; then echo "NVME-LINUX-HOST-$1: PASS"; else echo "NVME-LINUX-HOST-$1: FAIL (rc=$2)"; fails=$((fails+1)); fi
}

TR=${NVME_TRANSPORT:-rdma}
DIGEST=
[ "${NVME_DIGEST:-0}" = 1 ] && DIGEST="-g -G"
echo "transport: $TR digests: ${DIGEST:-none}"
lab_dummy_up
if [ "$TR" = rdma ]; then
  rdma link add siw0 type siw netdev dummy0 || { echo "NVME-LINUX-HOST: FAIL (rdma link add)"; exit 1; }
else
  modprobe nvme-tcp || { echo "NVME-LINUX-HOST: FAIL (modprobe nvme-tcp)"; exit 1; }
fi
# NVME_BACKING=loop exports a loop device (O_DIRECT, the target's disk
# workers, in-capsule writes to a direct-I/O device) instead of RAM.
DISK="--size 256MiB"
if [ "${NVME_BACKING:-ram}" = loop ]; then
  truncate -s 256M /tmp/backing.img && LOOP=$(losetup -f) && losetup "$LOOP" /tmp/backing.img || { echo "NVME-LINUX-HOST: FAIL (losetup)"; exit 1; }
  DISK="--device $LOOP"
fi
echo "target disk: $DISK"
rdisk --log-level "${RDISK_LOG_LEVEL:-info}" target --listen $LAB_IP:4420 --allow-any-host $DISK > /tmp/target.log 2>&1 &
TPID=$!
# Up to 30 s for the target to listen (TCG on a loaded host is slow to start).
k=0; while [ $k -lt 150 ] && ! grep -q "serving" /tmp/target.log; do k=$((k+1)); sleep 0.2; done
cat /tmp/target.log

nvme discover -t $TR -a $LAB_IP -s 4420; step discover $?
if [ "$TR" = tcp ]; then
  # No -s: nvme-cli asks the well-known NVMe/TCP discovery port 8009.
  nvme discover -t tcp -a $LAB_IP | tee /tmp/disc8009; step discover-8009 $?
  grep -q "trsvcid: 8009" /tmp/disc8009; step discover-8009-entry $?
fi
nvme connect -t $TR -a $LAB_IP -s 4420 -n $NQN $DIGEST; step connect $?
dev=
i=0
while [ $i -lt 100 ] && [ -z "$dev" ]; do
  for c in /sys/class/nvme/nvme*; do
    [ -f $c/subsysnqn ] && [ "$(cat $c/subsysnqn)" = "$NQN" ] || continue
    for n in $(ls -d $c/nvme*n* 2>/dev/null); do
      d=$(basename $n | sed 's/c[0-9]*n/n/')
      [ -b /dev/$d ] && dev=/dev/$d
    done
  done
  i=$((i+1)); sleep 0.2
done
if [ -z "$dev" ]; then
  step namespace 1
else
  echo "namespace device: $dev ($(cat /sys/block/$(basename $dev)/size) sectors)"
  step namespace 0
  ctrl=$(ls -d /sys/class/nvme/nvme* | while read c; do [ "$(cat $c/subsysnqn)" = "$NQN" ] && echo $c; done | head -1)
  echo "controller $ctrl: transport $(cat $ctrl/transport) address $(cat $ctrl/address)"
  [ "$(cat $ctrl/transport)" = "$TR" ]; step transport-$TR $?
  nvme list
  nvme id-ctrl $dev | head -40; step id-ctrl $?
  nvme id-ns $dev | head -20; step id-ns $?
  dd if=/dev/urandom of=/tmp/pattern bs=1M count=$MB 2>/dev/null
  t0=$(cut -d' ' -f1 /proc/uptime)
  dd if=/tmp/pattern of=$dev bs=1M count=$MB oflag=direct conv=fsync; step write-${MB}MiB-odirect $?
  t1=$(cut -d' ' -f1 /proc/uptime)
  dd if=$dev of=/tmp/readback bs=1M count=$MB iflag=direct; step read-${MB}MiB-odirect $?
  t2=$(cut -d' ' -f1 /proc/uptime)
  cmp /tmp/pattern /tmp/readback; step verify-${MB}MiB $?
  echo "write $(echo "$t0 $t1" | awk '{printf "%.2f", $2-$1}') s, read $(echo "$t1 $t2" | awk '{printf "%.2f", $2-$1}') s (TCG guest)"
  # 4 KiB random writes at odd offsets through the page cache-free path.
  dd if=/tmp/pattern of=$dev bs=4k count=16 seek=777 oflag=direct 2>/dev/null
  dd if=$dev of=/tmp/small bs=4k count=16 skip=777 iflag=direct 2>/dev/null
  dd if=/tmp/pattern of=/tmp/small.want bs=4k count=16 2>/dev/null
  cmp /tmp/small /tmp/small.want; step verify-4k-offset $?
  nvme smart-log $dev; step smart-log $?
  nvme flush $dev -n 1; step flush $?
  nvme dsm $dev -n 1 -d -s 0 -b 8 2>&1; step dsm-deallocate $?
  nvme write-zeroes $dev -n 1 -s 8 -c 7 2>&1; step write-zeroes $?
  nvme get-feature $dev -f 0x6 2>&1; step get-feature-vwc $?
  # Live management: a namespace added through rdisk admin appears on the
  # connected host (Namespace Attribute Changed event), a resize takes
  # effect, a removal makes it go away.
  nsdev() { # the block device of namespace $1 of the connection
    for n in $(ls -d $ctrl/nvme*n* 2>/dev/null); do
      [ "$(cat $n/nsid 2>/dev/null)" = "$1" ] && basename $n | sed 's/c[0-9]*n/n/'
    done
  }
  waitfor() { # waitfor CMD...: up to 10 s
    j=0
    while [ $j -lt 50 ]; do "$@" && return 0; j=$((j+1)); sleep 0.2; done
    return 1
  }
  echo "--- before rdisk admin ns add"; nvme list; lsblk 2>/dev/null || cat /proc/partitions
  rdisk admin ns add $NQN --nsid 2 --device ram:64MiB; step admin-ns-add $?
  have2() { [ -n "$(nsdev 2)" ]; }
  grown2() { [ "$(cat /sys/block/$dev2/size 2>/dev/null)" = 262144 ]; }
  gone2() { [ ! -b /dev/$dev2 ]; }
  waitfor have2
  dev2=$(nsdev 2)
  [ -n "$dev2" ] && [ "$(cat /sys/block/$dev2/size)" = 131072 ]; step admin-ns-appears $?
  echo "--- after: namespace 2 is ${dev2:-missing}"; nvme list; lsblk 2>/dev/null || cat /proc/partitions
  rdisk admin ns resize $NQN 2 128MiB; step admin-ns-resize $?
  waitfor grown2; step admin-resize-seen $?
  echo "--- after the resize to 128 MiB"; nvme list; lsblk 2>/dev/null || cat /proc/partitions
  dd if=/tmp/pattern of=/dev/$dev2 bs=1M count=1 seek=127 oflag=direct 2>/dev/null; step admin-write-grown $?
  rdisk admin status
  rdisk admin ns rm $NQN 2; step admin-ns-rm $?
  waitfor gone2; step admin-ns-gone $?
  echo "--- after rdisk admin ns rm"; nvme list
fi
nvme disconnect -n $NQN; step disconnect $?
sleep 0.5
echo "--- target log"; cat /tmp/target.log | tail -20
kill $TPID 2>/dev/null
echo "--- kernel log"; dmesg | grep -Ei 'nvme|siw|rdma' | tail -30
echo "=== summary ==="
if [ $fails = 0 ]; then echo "NVME-LINUX-HOST: PASS"; exit 0; fi
echo "NVME-LINUX-HOST: FAIL ($fails steps)"
exit 1
