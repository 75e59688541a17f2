#!/bin/sh
# rdisk interop: the Linux kernel's SRP initiator (ib_srp over siw, RDMA/CM)
# against rdisk's SRP target (pure-Go iWARP), inside the lab guest. Run it
# through test/interop/run-srp-linux-initiator.sh; /guest/files (on PATH)
# holds `rdisk` and `sgreset` (test/interop/sgreset), both CGO_ENABLED=0, and
# the lab's lab-net.sh.
# Output: SRP-LINUX-INITIATOR-<step>: PASS|FAIL lines and SRP-LINUX-INITIATOR: PASS|FAIL.
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
ID_EXT=${SRP_ID_EXT:-0000000000000001}
IOC_GUID=${SRP_IOC_GUID:-726469736b000001}
MB=${SRP_MB:-64}
fails=0
step() { # step NAME RC
  if [ "$2" = 0 ]; then echo "SRP-LINUX-INITIATOR-$1: PASS"; else echo "SRP-LINUX-INITIATOR-$1: FAIL (rc=$2)"; fails=$((fails+1)); fi
}

lab_dummy_up
rdma link add siw0 type siw netdev dummy0 || { echo "SRP-LINUX-INITIATOR: FAIL (rdma link add)"; exit 1; }
if [ -n "${SRP_MODPARAMS:-}" ]; then
  # e.g. "never_register=1": no memory registration, scatter lists as
  # indirect descriptors; with "cmd_sg_entries=2 allow_ext_sg=1" tables longer
  # than 2 entries go outside the IU (the target fetches them).
  rmmod ib_srp && modprobe ib_srp $SRP_MODPARAMS; step modprobe-ib_srp $?
  for p in never_register register_always cmd_sg_entries allow_ext_sg indirect_sg_entries use_imm_data; do
    echo "ib_srp $p=$(cat /sys/module/ib_srp/parameters/$p 2>/dev/null)"
  done
fi
# rdisk target also serves the disk over NVMe-oF and iSCSI, on loopback.
rdisk --log-level "${RDISK_LOG_LEVEL:-debug}" target --size 256MiB --srp-listen $LAB_IP:5555 --allow-any-host \
  --srp-id-ext $ID_EXT --srp-ioc-guid $IOC_GUID > /tmp/target.log 2>&1 &
TPID=$!
i=0
while [ $i -lt 50 ] && ! grep -q 'SRP over RDMA/CM' /tmp/target.log; do i=$((i+1)); sleep 0.2; done
cat /tmp/target.log
HOST=$(ls /sys/class/infiniband_srp/ | grep siw0 | head -1)
echo "ib_srp host: $HOST"
[ -n "$HOST" ]; step srp-host $?
LINE="id_ext=$ID_EXT,ioc_guid=$IOC_GUID,dest=$LAB_IP:5555${SRP_EXTRA:+,$SRP_EXTRA}"
echo "add_target: $LINE"
echo "$LINE" > /sys/class/infiniband_srp/$HOST/add_target; step add-target $?
dev=
i=0
while [ $i -lt 100 ] && [ -z "$dev" ]; do
  for d in /sys/class/scsi_device/*; do
    [ -d "$d/device/block" ] || continue
    v=$(cat $d/device/vendor 2>/dev/null)
    case "$v" in RDISK*) dev=/dev/$(ls $d/device/block | head -1) ;; esac
  done
  i=$((i+1)); sleep 0.2
done
for d in /sys/class/scsi_device/*; do echo "scsi $(basename $d): $(cat $d/device/vendor) $(cat $d/device/model) $(cat $d/device/rev) -> $(ls $d/device/block 2>/dev/null)"; done
ls /sys/class/srp_remote_ports/ 2>/dev/null
if [ -z "$dev" ] || [ ! -b "$dev" ]; then
  step scsi-disk 1
else
  step scsi-disk 0
  b=$(basename $dev)
  echo "disk $dev: $(cat /sys/block/$b/size) sectors, max_sectors_kb $(cat /sys/block/$b/queue/max_sectors_kb), nr_requests $(cat /sys/block/$b/queue/nr_requests)"
  for a in req_lim zero_req_lim ch_count cmd_sg_entries; do
    f=$(ls /sys/class/scsi_host/*/$a 2>/dev/null | head -1); [ -n "$f" ] && echo "$a: $(cat $f)"
  done
  dd if=/dev/urandom of=/tmp/pattern bs=1M count=$MB 2>/dev/null
  t0=$(cut -d' ' -f1 /proc/uptime)
  dd if=/tmp/pattern of=$dev bs=1M count=$MB oflag=direct conv=fsync; step write-${MB}MiB-odirect $?
  t1=$(cut -d' ' -f1 /proc/uptime)
  dd if=$dev of=/tmp/readback bs=1M count=$MB iflag=direct; step read-${MB}MiB-odirect $?
  t2=$(cut -d' ' -f1 /proc/uptime)
  cmp /tmp/pattern /tmp/readback; step verify-${MB}MiB $?
  echo "write $(echo "$t0 $t1" | awk '{printf "%.2f", $2-$1}') s, read $(echo "$t1 $t2" | awk '{printf "%.2f", $2-$1}') s (TCG guest)"
  # Small O_DIRECT writes (immediate data) and reads at an odd offset.
  dd if=/tmp/pattern of=$dev bs=4k count=16 seek=777 oflag=direct 2>/dev/null
  dd if=$dev of=/tmp/small bs=4k count=16 skip=777 iflag=direct 2>/dev/null
  dd if=/tmp/pattern of=/tmp/small.want bs=4k count=16 2>/dev/null
  cmp /tmp/small /tmp/small.want; step verify-4k-offset $?
  # Buffered I/O through the page cache, then a flush (SYNCHRONIZE CACHE).
  dd if=/tmp/pattern of=$dev bs=64k count=32 seek=100 conv=fsync 2>/dev/null; step buffered-write-fsync $?
  echo 3 > /proc/sys/vm/drop_caches
  dd if=$dev of=/tmp/buf bs=64k count=32 skip=100 2>/dev/null
  dd if=/tmp/pattern of=/tmp/buf.want bs=64k count=32 2>/dev/null
  cmp /tmp/buf /tmp/buf.want; step verify-buffered $?
  # Task management: a SCSI device reset, which ib_srp sends as SRP_TSK_MGMT
  # LOGICAL UNIT RESET; the disk works afterwards (after its unit attention).
  sgreset $dev; step lun-reset $?
  dd if=$dev of=/tmp/small bs=4k count=16 skip=777 iflag=direct 2>/dev/null
  cmp /tmp/small /tmp/small.want; step verify-after-reset $?
fi
for p in /sys/class/srp_remote_ports/port-*; do [ -e $p/delete ] && echo 1 > $p/delete; done
i=0
while [ $i -lt 50 ] && ls /sys/class/srp_remote_ports/port-* >/dev/null 2>&1; do i=$((i+1)); sleep 0.2; done
! ls /sys/class/srp_remote_ports/port-* >/dev/null 2>&1; step remove-target $?
sleep 0.5
kill $TPID 2>/dev/null
wait $TPID 2>/dev/null
# rdisk target prints its SRP counters when it stops. Without memory
# registration (never_register=1) ib_srp sends every request with more than
# one S/G entry as an indirect descriptor table: check that some were; with
# allow_ext_sg=1, that some tables were outside the IU (fetched by the target).
grep 'SRP stats' /tmp/target.log
case " ${SRP_MODPARAMS:-} " in
*" never_register=1 "*)
  grep -Eq 'SRP stats \{.* (Indirect|External):[1-9]' /tmp/target.log
  step indirect-descriptors $? ;;
esac
case " ${SRP_MODPARAMS:-} " in
*" allow_ext_sg=1 "*)
  grep -q 'SRP stats {.* External:[1-9]' /tmp/target.log
  step external-tables $? ;;
esac
echo "--- target log"; tail -40 /tmp/target.log
echo "--- kernel log"; dmesg | grep -Ei 'srp|siw|scsi|sd[a-z]' | grep -v 'speed is unknown' | tail -40
echo "=== summary ==="
if [ $fails = 0 ]; then echo "SRP-LINUX-INITIATOR: PASS"; exit 0; fi
echo "SRP-LINUX-INITIATOR: FAIL ($fails steps)"
exit 1
