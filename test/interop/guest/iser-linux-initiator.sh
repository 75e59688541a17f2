#!/bin/sh
# rdisk interop: the Linux kernel's iSCSI initiators (open-iscsi: ib_iser
# over siw, and iscsi_tcp) against rdisk's iSCSI/iSER portal (pure-Go
# iWARP), inside the lab guest. Run it through
# test/interop/run-iser-linux.sh; /guest/files (on PATH) holds `rdisk`
# (CGO_ENABLED=0) and the lab's lab-net.sh.
# Output: ISER-LINUX-<step>: PASS|FAIL lines and ISER-LINUX: PASS|FAIL.
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
IQN=iqn.2026-11.io.rdisk:default
MB=${ISER_MB:-64}
fails=0
step() { # step NAME RC
  if [ "$2" = 0 ]; then echo "ISER-LINUX-$1: PASS"; else echo "ISER-LINUX-$1: FAIL (rc=$2)"; fails=$((fails+1)); fi
}

# disk_of: the block device of the session to $IQN (empty if none yet).
disk_of() {
  iscsiadm -m session -P 3 2>/dev/null | sed -n 's/.*Attached scsi disk \([a-z]*\).*/\1/p' | head -1
}

# exercise TRANSPORT IFACE: discovery, login, a disk, 64 MiB O_DIRECT
# write/read/verify, logout.
exercise() {
  tr=$1
  iface=$2
  echo "=== $tr (iface $iface)"
  iscsiadm -m discovery -t st -p $LAB_IP:3260 -I $iface; step $tr-discovery $?
  iscsiadm -m node -T $IQN -p $LAB_IP:3260 -I $iface --login; step $tr-login $?
  d=
  i=0
  while [ -z "$d" ] && [ $i -lt 100 ]; do d=$(disk_of); [ -n "$d" ] && [ -b /dev/$d ] || d=; i=$((i+1)); sleep 0.2; done
  if [ -z "$d" ]; then
    step $tr-disk 1
  else
    dev=/dev/$d
    step $tr-disk 0
    iscsiadm -m session -P 1 | grep -E 'Target:|Current Portal|Iface Transport|Iface Name|SID|State'
    echo "disk $dev: $(cat /sys/block/$d/size) sectors, vendor $(cat /sys/block/$d/device/vendor) model $(cat /sys/block/$d/device/model), max_sectors_kb $(cat /sys/block/$d/queue/max_sectors_kb)"
    t0=$(cut -d' ' -f1 /proc/uptime)
    dd if=/tmp/pattern of=$dev bs=1M count=$MB oflag=direct conv=fsync 2>/dev/null; step $tr-write-${MB}MiB-odirect $?
    t1=$(cut -d' ' -f1 /proc/uptime)
    dd if=$dev of=/tmp/readback bs=1M count=$MB iflag=direct 2>/dev/null; step $tr-read-${MB}MiB-odirect $?
    t2=$(cut -d' ' -f1 /proc/uptime)
    cmp /tmp/pattern /tmp/readback; step $tr-verify-${MB}MiB $?
    echo "$tr: write $(echo "$t0 $t1" | awk '{printf "%.2f", $2-$1}') s, read $(echo "$t1 $t2" | awk '{printf "%.2f", $2-$1}') s (TCG guest)"
    # 4 KiB writes at an odd offset, read back.
    dd if=/tmp/pattern of=$dev bs=4k count=16 seek=777 oflag=direct 2>/dev/null
    dd if=$dev of=/tmp/small bs=4k count=16 skip=777 iflag=direct 2>/dev/null
    dd if=/tmp/pattern of=/tmp/small.want bs=4k count=16 2>/dev/null
    cmp /tmp/small /tmp/small.want; step $tr-verify-4k-offset $?
    if command -v blkdiscard >/dev/null; then
      blkdiscard -o 1048576 -l 1048576 $dev; step $tr-discard $?
    fi
  fi
  iscsiadm -m node -T $IQN -p $LAB_IP:3260 -I $iface --logout; step $tr-logout $?
  iscsiadm -m node -o delete -T $IQN >/dev/null 2>&1
  i=0; while [ -n "$(disk_of)" ] && [ $i -lt 25 ]; do sleep 0.2; i=$((i+1)); done
}

lab_dummy_up
rdma link add siw0 type siw netdev dummy0 || { echo "ISER-LINUX: FAIL (rdma link add)"; exit 1; }
# rdisk target also serves the disk over NVMe-oF and SRP, on loopback.
rdisk --log-level "${RDISK_LOG_LEVEL:-info}" target --size 256MiB --iscsi-listen $LAB_IP:3260 --allow-any-host \
  > /tmp/target.log 2>&1 &
TPID=$!
i=0
while [ $i -lt 50 ] && ! grep -q 'iSCSI/TCP and iSER' /tmp/target.log; do i=$((i+1)); sleep 0.2; done
cat /tmp/target.log
mkdir -p /run/lock/iscsi /etc/iscsi
[ -f /etc/iscsi/initiatorname.iscsi ] || echo "InitiatorName=iqn.2026-11.io.rdisk:lab-guest" > /etc/iscsi/initiatorname.iscsi
iscsid
sleep 1
dd if=/dev/urandom of=/tmp/pattern bs=1M count=$MB 2>/dev/null

exercise iser iser
# iscsi_tcp is not in the lab image; the harness passes the module files.
if ! modprobe iscsi_tcp 2>/dev/null; then
  modprobe libiscsi 2>/dev/null
  for m in libiscsi_tcp iscsi_tcp; do
    [ -f /guest/files/$m.ko ] && insmod /guest/files/$m.ko
  done
fi
exercise tcp default

sleep 0.5
echo "--- target log"; tail -30 /tmp/target.log
kill $TPID 2>/dev/null
echo "--- kernel log"; dmesg | grep -Ei 'iser|iscsi|siw|sd[a-z]|scsi' | tail -40
echo "=== summary ==="
if [ $fails = 0 ]; then echo "ISER-LINUX: PASS"; exit 0; fi
echo "ISER-LINUX: FAIL ($fails steps)"
exit 1
