#!/bin/sh
# rdisk interop over Soft-RoCE (rdma_rxe on dummy0, RoCE v2), against the
# kernel's own RDMA storage code, with rdisk on the verbs provider (rdma-core
# over rxe), inside the RDMA lab guest. Six cells, each moving 64 MiB of
# random data and verifying it:
#   nvme-linux-host  Linux nvme-rdma host (nvme-cli)     -> rdisk NVMe-oF target
#   srp-linux        Linux ib_srp initiator (add_target) -> rdisk SRP target
#   iser-linux       open-iscsi, iface iser (ib_iser)     -> rdisk iSER target
#   nvme-host        rdisk bench (NVMe-oF host)           -> Linux nvmet-rdma
#   srp-host         rdisk bench (SRP initiator)          -> Linux ib_srpt (LIO)
#   iser-host        rdisk bench (iSER initiator)         -> Linux LIO isert
# The Linux initiators write 64 MiB from /dev/urandom with O_DIRECT, read it
# back and compare; rdisk bench --rw write --verify --size 64MiB writes
# self-describing blocks over all of it and reads every block back.
# Run it through test/interop/run-verbs-rxe.sh; /guest/files (PATH) holds:
#   rdisk        CGO_ENABLED=1 go build -tags verbs ./cmd/rdisk
#   lab-net.sh, nvmet-lib.sh   the lab's helpers (inlined if absent)
# Environment (run-guest.sh --env):
#   RXE_CELLS="..."  the cells to run (default all six, in the order above)
#   RXE_MB=N         MiB per cell (default 64)
#   RXE_RUNTIME=N    seconds of the rdisk bench write runs (default 20: they
#                    must cover RXE_MB at TCG speed; verified_blocks tells)
#   RXE_DEBUG=1      rdisk --log-level debug
# Output: "RXE-<cell>-<step>: PASS|FAIL ..." lines, one "RXE-<cell>: PASS|FAIL"
# per cell, a summary and "RXE: PASS|FAIL"; exit 0 only if every cell passed.
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
CELLS=${RXE_CELLS:-nvme-linux-host srp-linux iser-linux nvme-host srp-host iser-host}
MB=${RXE_MB:-64}
BLOCKS=$((MB * 2048)) # 512-byte blocks
LVL=info
[ -n "${RXE_DEBUG:-}" ] && LVL=debug
NQN=nqn.2026-11.io.rdisk:default
IQN=iqn.2026-11.io.rdisk:default
KNQN=nqn.2026-11.io.rdisk:nvmet-rxe
KIQN=iqn.2026-11.io.rdisk:lio-rxe
IDEXT=0000000000000001
IOC=726469736b000001
T=/sys/kernel/config/target
NVMET=/sys/kernel/config/nvmet
SUMMARY=/tmp/summary.txt
: > $SUMMARY
failed=0
cellfail=0

echo "RXE: kernel=$(uname -r) rdisk=$(command -v rdisk) cells=$CELLS MiB=$MB"
command -v rdisk >/dev/null || { echo "RXE: FAIL (no rdisk binary in the guest)"; exit 1; }
lab_dummy_up
rdma link add rxe0 type rxe netdev dummy0 || { echo "RXE: FAIL (rdma link add rxe0)"; exit 1; }
rdma link show rxe0/1
ulimit -l unlimited 2>/dev/null || echo "RXE: cannot raise RLIMIT_MEMLOCK (ulimit -l: $(ulimit -l))"
rdisk rdma devices
dd if=/dev/urandom of=/tmp/pattern bs=1M count=$MB 2>/dev/null

step() { # CELL-STEP RC [DETAILS]
  if [ "$2" = 0 ]; then echo "RXE-$1: PASS${3:+ $3}"; else echo "RXE-$1: FAIL (rc=$2)${3:+ $3}"; cellfail=1; fi
}
cell_start() { cellfail=0; cmark=$(dmesg | wc -l); ct0=$(date +%s); echo; echo "=== cell $1 ==="; }
cell_end() { # CELL DETAILS
  if [ $cellfail = 0 ]; then res=PASS; else res=FAIL; failed=1; fi
  line="RXE-$1: $res $2 wall=$(($(date +%s) - ct0))s"
  echo "$line"; echo "$line" >> $SUMMARY
  if [ $res != PASS ]; then
    echo "--- kernel log of the cell (dmesg | tail -40)"
    dmesg | tail -n +$((cmark + 1)) | grep -Eiv 'speed is unknown' | tail -40
    [ -n "$TPID" ] && { echo "--- rdisk target log (tail -60)"; tail -60 /tmp/target.log; }
  fi
}

json_num() {
  sed -n "s/^ *\"$2\": *\([0-9.e+-]*\),*$/\1/p" "$1" | head -1
}

# verify_dev CELL DEV: 64 MiB O_DIRECT write, read back, compare, and 4 KiB
# at an odd offset.
verify_dev() {
  c=$1 dev=$2
  t0=$(cut -d' ' -f1 /proc/uptime)
  dd if=/tmp/pattern of=$dev bs=1M count=$MB oflag=direct conv=fsync 2>/dev/null; step $c-write-${MB}MiB $?
  t1=$(cut -d' ' -f1 /proc/uptime)
  dd if=$dev of=/tmp/readback bs=1M count=$MB iflag=direct 2>/dev/null; step $c-read-${MB}MiB $?
  t2=$(cut -d' ' -f1 /proc/uptime)
  cmp /tmp/pattern /tmp/readback; step $c-verify-${MB}MiB $? "write $(echo "$t0 $t1" | awk '{printf "%.2f", $2-$1}')s read $(echo "$t1 $t2" | awk '{printf "%.2f", $2-$1}')s (TCG)"
  rm -f /tmp/readback
  dd if=/tmp/pattern of=$dev bs=4k count=16 seek=777 oflag=direct 2>/dev/null
  dd if=$dev of=/tmp/small bs=4k count=16 skip=777 iflag=direct 2>/dev/null
  dd if=/tmp/pattern of=/tmp/small.want bs=4k count=16 2>/dev/null
  cmp /tmp/small /tmp/small.want; step $c-verify-4k-offset $?
}

# bench_verify CELL URL: rdisk bench write --verify over the first $MB MiB.
bench_verify() {
  c=$1 url=$2
  echo "--- rdisk --rdma verbs bench $url --rw write --verify --bs 128KiB --size ${MB}MiB"
  rdisk --log-level $LVL --rdma verbs bench "$url" --rw write --verify --bs 128KiB --qd 8 --runtime ${RXE_RUNTIME:-20}s --size ${MB}MiB --json \
    > /tmp/$c.json 2> /tmp/$c.err; rc=$?
  cat /tmp/$c.json; tail -20 /tmp/$c.err
  ios=$(json_num /tmp/$c.json ios); errs=$(json_num /tmp/$c.json errors)
  verrs=$(json_num /tmp/$c.json verify_errors); vblk=$(json_num /tmp/$c.json verified_blocks)
  bw=$(json_num /tmp/$c.json bw_bytes_per_sec)
  d="ios=${ios:-0} MBps=$(echo ${bw:-0} | awk '{printf "%.1f", $1/1e6}') errors=${errs:-?} verify_errors=${verrs:-?} verified_blocks=${vblk:-0}/$BLOCKS"
  if [ $rc = 0 ] && [ "$errs" = 0 ] && [ "$verrs" = 0 ] && [ "${vblk:-0}" -ge $BLOCKS ]; then step $c-bench-verify 0 "$d"; else step $c-bench-verify 1 "rc=$rc $d: $(tail -c 300 /tmp/$c.err)"; fi
  echo "--- rdisk bench randrw --verify 4 KiB"
  rdisk --log-level $LVL --rdma verbs bench "$url" --rw randrw --verify --bs 4KiB --qd 16 --runtime 4s --size ${MB}MiB --json \
    > /tmp/$c-rr.json 2> /tmp/$c-rr.err; rc=$?
  tail -20 /tmp/$c-rr.err
  ios=$(json_num /tmp/$c-rr.json ios); errs=$(json_num /tmp/$c-rr.json errors); verrs=$(json_num /tmp/$c-rr.json verify_errors)
  if [ $rc = 0 ] && [ "${ios:-0}" -gt 0 ] && [ "$errs" = 0 ] && [ "$verrs" = 0 ]; then step $c-randrw-verify 0 "ios=$ios"; else step $c-randrw-verify 1 "rc=$rc ios=${ios:-0} errors=${errs:-?} verify_errors=${verrs:-?}: $(tail -c 300 /tmp/$c-rr.err)"; fi
}

# --- rdisk target on verbs/rxe (NVMe-oF 4420, iSCSI/iSER 3260, SRP 5555)
TPID=
start_rdisk_target() {
  [ -n "$TPID" ] && kill -0 $TPID 2>/dev/null && return 0
  rdisk --log-level $LVL --rdma verbs target --listen $LAB_IP:4420 --allow-any-host --size 256MiB \
    --iscsi-listen $LAB_IP:3260 --srp-listen $LAB_IP:5555 --srp-id-ext $IDEXT --srp-ioc-guid $IOC --admin-socket "" \
    > /tmp/target.log 2>&1 &
  TPID=$!
  i=0
  while [ $i -lt 100 ] && ! grep -q 'SRP over RDMA/CM' /tmp/target.log; do
    kill -0 $TPID 2>/dev/null || break
    i=$((i+1)); sleep 0.2
  done
  cat /tmp/target.log
  kill -0 $TPID 2>/dev/null
}
stop_rdisk_target() {
  [ -n "$TPID" ] || return 0
  kill -INT $TPID 2>/dev/null
  i=0; while [ $i -lt 100 ] && kill -0 $TPID 2>/dev/null; do i=$((i+1)); sleep 0.2; done
  kill -9 $TPID 2>/dev/null
  wait $TPID; echo "rdisk target exit=$?"; tail -5 /tmp/target.log
  TPID=
}
target_alive() { # CELL
  kill -0 $TPID 2>/dev/null; step $1-target-alive $?
}

cell_nvme_linux_host() {
  c=nvme-linux-host
  start_rdisk_target; step $c-target $? "$(grep -o 'verbs:rxe0' /tmp/target.log | head -1)"
  nvme discover -t rdma -a $LAB_IP -s 4420; step $c-discover $?
  nvme connect -t rdma -a $LAB_IP -s 4420 -n $NQN; step $c-connect $?
  dev=
  i=0
  while [ $i -lt 100 ] && [ -z "$dev" ]; do
    for ctl in /sys/class/nvme/nvme*; do
      [ -f $ctl/subsysnqn ] && [ "$(cat $ctl/subsysnqn)" = "$NQN" ] || continue
      for n in $ctl/nvme*n*; do [ -e "$n" ] || continue; d=$(basename $n | sed 's/c[0-9]*n/n/'); [ -b /dev/$d ] && dev=/dev/$d; done
    done
    i=$((i+1)); sleep 0.2
  done
  if [ -z "$dev" ]; then step $c-disk 1; else
    step $c-disk 0 "$dev transport=$(cat /sys/class/nvme/$(basename $dev | sed 's/n[0-9]*$//')/transport 2>/dev/null)"
    verify_dev $c $dev
  fi
  nvme disconnect -n $NQN; step $c-disconnect $?
  target_alive $c
  cell_end $c "(Linux nvme-rdma -> rdisk NVMe-oF target, verbs/rxe)"
}

cell_srp_linux() {
  c=srp-linux
  start_rdisk_target; step $c-target $?
  HOST=$(ls /sys/class/infiniband_srp/ | grep rxe0 | head -1)
  [ -n "$HOST" ]; step $c-srp-host $? "$HOST"
  echo "id_ext=$IDEXT,ioc_guid=$IOC,dest=$LAB_IP:5555" > /sys/class/infiniband_srp/$HOST/add_target; step $c-add-target $?
  dev=
  i=0
  while [ $i -lt 100 ] && [ -z "$dev" ]; do
    for d in /sys/class/scsi_device/*; do
      [ -d "$d/device/block" ] || continue
      case "$(cat $d/device/vendor 2>/dev/null)" in RDISK*) ls /sys/class/srp_remote_ports/ >/dev/null 2>&1 && dev=/dev/$(ls $d/device/block | head -1) ;; esac
    done
    i=$((i+1)); sleep 0.2
  done
  if [ -z "$dev" ]; then step $c-disk 1; else step $c-disk 0 $dev; verify_dev $c $dev; fi
  for p in /sys/class/srp_remote_ports/port-*; do [ -e $p/delete ] && echo 1 > $p/delete; done
  sleep 1
  target_alive $c
  cell_end $c "(Linux ib_srp -> rdisk SRP target, verbs/rxe)"
}

disk_of_session() {
  iscsiadm -m session -P 3 2>/dev/null | sed -n 's/.*Attached scsi disk \([a-z]*\).*/\1/p' | head -1
}
ISCSID=
start_iscsid() {
  [ -n "$ISCSID" ] && return
  mkdir -p /run/lock/iscsi /etc/iscsi
  [ -f /etc/iscsi/initiatorname.iscsi ] || echo "InitiatorName=iqn.2026-11.io.rdisk:lab-guest" > /etc/iscsi/initiatorname.iscsi
  iscsid; ISCSID=1; sleep 1
}

cell_iser_linux() {
  c=iser-linux
  start_rdisk_target; step $c-target $? "$(grep -o 'iSCSI/TCP and iSER[^)]*' /tmp/target.log | head -1)"
  start_iscsid
  iscsiadm -m discovery -t st -p $LAB_IP:3260 -I iser; step $c-discovery $?
  iscsiadm -m node -T $IQN -p $LAB_IP:3260 -I iser --login; step $c-login $?
  d=
  i=0
  while [ -z "$d" ] && [ $i -lt 100 ]; do d=$(disk_of_session); [ -n "$d" ] && [ -b /dev/$d ] || d=; i=$((i+1)); sleep 0.2; done
  iscsiadm -m session -P 1 | grep -E 'Target:|Iface Transport|State'
  if [ -z "$d" ]; then step $c-disk 1; else step $c-disk 0 /dev/$d; verify_dev $c /dev/$d; fi
  iscsiadm -m node -T $IQN -p $LAB_IP:3260 -I iser --logout; step $c-logout $?
  iscsiadm -m node -o delete -T $IQN >/dev/null 2>&1
  i=0; while [ -n "$(disk_of_session)" ] && [ $i -lt 25 ]; do sleep 0.2; i=$((i+1)); done
  target_alive $c
  cell_end $c "(open-iscsi iface iser -> rdisk iSER target, verbs/rxe)"
}

# --- the kernel's targets, on a loop device of $MB+16 MiB each
loopdev() { # FILE -> prints the loop device
  dd if=/dev/zero of=$1 bs=1M count=$((MB + 16)) 2>/dev/null
  l=$(losetup -f); losetup $l $1 && echo $l
}

cell_nvme_host() {
  c=nvme-host
  stop_rdisk_target
  modprobe nvmet-rdma
  L=$(loopdev /tmp/nvmet.img); [ -n "$L" ]; step $c-loop $? "$L"
  mkdir -p $NVMET/subsystems/$KNQN
  echo 1 > $NVMET/subsystems/$KNQN/attr_allow_any_host
  mkdir -p $NVMET/subsystems/$KNQN/namespaces/1
  printf '%s' "$L" > $NVMET/subsystems/$KNQN/namespaces/1/device_path
  echo 1 > $NVMET/subsystems/$KNQN/namespaces/1/enable
  mkdir -p $NVMET/ports/1
  echo rdma > $NVMET/ports/1/addr_trtype; echo ipv4 > $NVMET/ports/1/addr_adrfam
  echo $LAB_IP > $NVMET/ports/1/addr_traddr; echo 4421 > $NVMET/ports/1/addr_trsvcid
  ln -s $NVMET/subsystems/$KNQN $NVMET/ports/1/subsystems/$KNQN; step $c-nvmet $?
  rdisk --rdma verbs discover nvme://$LAB_IP:4421; step $c-discover $?
  bench_verify $c nvme://$LAB_IP:4421/$KNQN/1
  echo 3 > /proc/sys/vm/drop_caches
  magic=$(dd if=$L bs=512 count=1 skip=2048 iflag=direct 2>/dev/null | head -c 8)
  [ "$magic" = RDSKVRFY ]; step $c-backing $? "LBA 2048 on $L holds $magic"
  dmesg | grep -i nvmet | tail -5
  cell_end $c "(rdisk NVMe-oF host, verbs/rxe -> Linux nvmet-rdma)"
}

cell_srp_host() {
  c=srp-host
  stop_rdisk_target
  L=$(loopdev /tmp/srpt.img); [ -n "$L" ]; step $c-loop $? "$L"
  NG=$(cat /sys/class/infiniband/rxe0/node_guid | tr -d ':')
  PORTN=$(cut -d: -f5-8 /sys/class/infiniband/rxe0/ports/1/gids/0)
  mkdir -p $T/core/iblock_1/srpdisk
  echo "udev_path=$L" > $T/core/iblock_1/srpdisk/control
  echo 1 > $T/core/iblock_1/srpdisk/enable
  mkdir -p $T/srpt
  echo 5000 > $T/srpt/discovery_auth/rdma_cm_port
  mkdir -p $T/srpt/$PORTN/tpg_1/lun/lun_0
  ln -s $T/core/iblock_1/srpdisk $T/srpt/$PORTN/tpg_1/lun/lun_0/srpdisk
  mkdir -p $T/srpt/$PORTN/tpg_1/acls/$LAB_IP/lun_0
  ln -s $T/srpt/$PORTN/tpg_1/lun/lun_0 $T/srpt/$PORTN/tpg_1/acls/$LAB_IP/lun_0/lun_0
  echo 1 > $T/srpt/$PORTN/tpg_1/enable; step $c-srpt $? "id_ext=ioc_guid=$NG port $PORTN rdma_cm_port 5000"
  bench_verify $c srp://$LAB_IP:5000/$NG/$NG/0
  echo 3 > /proc/sys/vm/drop_caches
  magic=$(dd if=$L bs=512 count=1 skip=2048 iflag=direct 2>/dev/null | head -c 8)
  [ "$magic" = RDSKVRFY ]; step $c-backing $? "LBA 2048 on $L holds $magic"
  dmesg | grep -i srpt | tail -5
  cell_end $c "(rdisk SRP initiator, verbs/rxe -> Linux ib_srpt)"
}

cell_iser_host() {
  c=iser-host
  stop_rdisk_target
  L=$(loopdev /tmp/isert.img); [ -n "$L" ]; step $c-loop $? "$L"
  TPG=$T/iscsi/$KIQN/tpgt_1
  mkdir -p $T/core/iblock_2/iserdisk
  echo "udev_path=$L" > $T/core/iblock_2/iserdisk/control
  echo 1 > $T/core/iblock_2/iserdisk/enable
  mkdir -p $TPG/np/$LAB_IP:3260
  echo 1 > $TPG/np/$LAB_IP:3260/iser
  mkdir -p $TPG/lun/lun_0
  ln -s $T/core/iblock_2/iserdisk $TPG/lun/lun_0/iserdisk
  echo 1 > $TPG/attrib/generate_node_acls
  echo 1 > $TPG/attrib/cache_dynamic_acls
  echo 0 > $TPG/attrib/demo_mode_write_protect
  echo 0 > $TPG/attrib/authentication
  echo 1 > $TPG/enable; step $c-lio $? "iser=$(cat $TPG/np/$LAB_IP:3260/iser)"
  bench_verify $c iser://$LAB_IP:3260/$KIQN/0
  echo 3 > /proc/sys/vm/drop_caches
  magic=$(dd if=$L bs=512 count=1 skip=2048 iflag=direct 2>/dev/null | head -c 8)
  [ "$magic" = RDSKVRFY ]; step $c-backing $? "LBA 2048 on $L holds $magic"
  dmesg | grep -iE 'isert|iscsi' | tail -5
  cell_end $c "(rdisk iSER initiator, verbs/rxe -> Linux LIO isert)"
}

for cell in $CELLS; do
  cell_start $cell
  case $cell in
    nvme-linux-host) cell_nvme_linux_host ;;
    srp-linux) cell_srp_linux ;;
    iser-linux) cell_iser_linux ;;
    nvme-host) cell_nvme_host ;;
    srp-host) cell_srp_host ;;
    iser-host) cell_iser_host ;;
    *) step $cell 1 "unknown cell"; cell_end $cell "" ;;
  esac
done
stop_rdisk_target

echo
echo "=== summary ==="
cat $SUMMARY
if [ $failed = 0 ]; then echo "RXE: PASS"; else echo "RXE: FAIL"; fi
exit $failed
