#!/bin/sh
# rdisk interop, bad input over Soft-RoCE: a misbehaving peer (badcm, on
# the verbs provider over rdma_rxe) sends malformed RDMA/CM private data to
# rdisk's target (verbs/rxe) for NVMe-oF, SRP and iSER, and junk as its
# first message where the CM data is accepted; each must get the protocol's
# answer (an NVMe/RDMA CM reject with its status, an SRP_LOGIN_REJ, an iSER
# accept as Linux isert gives, then a Reject or a dropped connection for the
# junk) and the target must stay up and keep serving good hosts.
# Run it through test/interop/run-verbs-badinput-rxe.sh; /guest/files (PATH):
#   rdisk, badcm  built with CGO_ENABLED=1 -tags verbs
#   lab-net.sh    the lab's helper (inlined if absent)
# Output: "BADIN-<case>: PASS|FAIL ..." lines, a summary and
# "BADIN: PASS|FAIL"; exit 0 only if every case passed.
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
IQN=iqn.2026-11.io.rdisk:default
IDEXT=0000000000000001
IOC=726469736b000001
SUMMARY=/tmp/summary.txt
: > $SUMMARY
failed=0
result() { # NAME PASS|FAIL DETAILS
  line="BADIN-$1: $2 $3"
  echo "$line"; echo "$line" >> $SUMMARY
  [ "$2" = PASS ] || failed=1
}
zeros() { # N bytes of zeros, hex
  printf "%0$(($1 * 2))d" 0
}

echo "BADIN: kernel=$(uname -r) rdisk=$(command -v rdisk) badcm=$(command -v badcm)"
command -v rdisk >/dev/null && command -v badcm >/dev/null || { echo "BADIN: FAIL (rdisk or badcm missing)"; exit 1; }
lab_dummy_up
rdma link add rxe0 type rxe netdev dummy0 || { echo "BADIN: FAIL (rdma link add rxe0)"; exit 1; }
ulimit -l unlimited 2>/dev/null
rdisk --log-level debug --rdma verbs target --listen $LAB_IP:4420 --transport rdma --discovery-listen "" --allow-any-host --size 64MiB \
  --iscsi-listen $LAB_IP:3260 --srp-listen $LAB_IP:5555 --srp-id-ext $IDEXT --srp-ioc-guid $IOC --admin-socket "" \
  > /tmp/target.log 2>&1 &
TPID=$!
i=0
while [ $i -lt 100 ] && ! grep -q 'SRP over RDMA/CM' /tmp/target.log; do kill -0 $TPID 2>/dev/null || break; i=$((i+1)); sleep 0.2; done
grep -E '^rdisk target: serving' /tmp/target.log

alive() { # CASE
  if kill -0 $TPID 2>/dev/null; then result $1-target-up PASS "rdisk target still running"; else result $1-target-up FAIL "rdisk target exited: $(tail -c 300 /tmp/target.log)"; fi
}

# cm_case NAME ADDR PD WANT_PREFIX: badcm must be rejected with private
# data starting with WANT_PREFIX (hex).
cm_case() {
  name=$1 addr=$2 pd=$3 want=$4
  echo; echo "=== $name: badcm -addr $addr -pd $pd"
  out=$(badcm -addr $addr -pd "$pd" 2>&1); echo "$out"
  got=$(echo "$out" | sed -n 's/^BADCM: REJECTED pd=//p')
  case "$got" in
    $want*) result $name PASS "rejected, private data ${got%"${got#????????????????}"}..." ;;
    *) result $name FAIL "want a reject with private data $want...: $out" ;;
  esac
  alive $name
}

# NVMe/RDMA CM request (NVMe-oF 1.1 7.4.1 / nvme_rdma_cm_req): recfmt,
# qid, hrqsize, hsqsize (le16 each), 24 reserved. The reject carries
# recfmt 0 and the status (le16).
cm_case nvme-recfmt $LAB_IP:4420 "0100 0000 2000 1f00 $(zeros 24)" 00000200   # NVME_RDMA_CM_INVALID_RECFMT
cm_case nvme-hrqsize $LAB_IP:4420 "0000 0000 0000 1f00 $(zeros 24)" 00000500  # NVME_RDMA_CM_INVALID_HRQSIZE
cm_case nvme-qid $LAB_IP:4420 "0000 ffff 2000 1f00 $(zeros 24)" 00000300      # NVME_RDMA_CM_INVALID_QID
# The InfiniBand CM (RoCE too) pads a REQ's private data to its fixed 92
# bytes (56 of them the ULP's), so "no private data" reads as 32 zero bytes:
# a valid record format and queue 0 of HRQSIZE 0.
cm_case nvme-empty $LAB_IP:4420 "" 00000500                                   # NVME_RDMA_CM_INVALID_HRQSIZE
# SRP over RDMA/CM: the private data is struct srp_login_req_rdma (56
# bytes: tag, req_buf_fmt, req_flags, opcode at byte 11, req_it_iu_len,
# initiator port ID, target port ID, imm_data_offset, reserved). Each bad
# login gets an SRP_LOGIN_REJ: opcode c2, 3 reserved bytes, the reason (be32).
iport=00000000000000001111111111111111
login() { # OPCODE IT_IU_LEN TARGET_PORT_ID
  echo "0000000000000001 0006 00 $1 $2 $iport $3 $(zeros 8)"
}
cm_case srp-opcode $LAB_IP:5555 "$(login ff 00002044 $IDEXT$IOC)" c200000000010000       # SRP_LOGIN_REJ_UNABLE_ESTABLISH_CHANNEL
cm_case srp-itiulen $LAB_IP:5555 "$(login 00 00000010 $IDEXT$IOC)" c200000000010002      # SRP_LOGIN_REJ_REQ_IT_IU_LENGTH_TOO_LARGE
cm_case srp-port $LAB_IP:5555 "$(login 00 00002044 00000000000000990000000000000099)" c200000000010003  # SRP_LOGIN_REJ_UNABLE_ASSOCIATE_CHANNEL
cm_case srp-empty $LAB_IP:5555 "00" c200000000010002                                     # padded to 56 zero bytes: SRP_LOGIN_REQ with it_iu_len 0

# iSER: the CM private data is a flags byte and 3 reserved bytes; Linux
# isert reads only the flags, and so does rdisk: all-ones is accepted
# (reply flags c0: ZBVA not used, and no Send with Invalidate, which the
# all-ones flags refuse). The junk message that follows must not
# take the target down.
echo; echo "=== iser-junk: badcm -addr $LAB_IP:3260 -pd ffffffff -send <76 bytes of ee>"
junk=$(printf 'ee%.0s' $(seq 76))
out=$(badcm -addr $LAB_IP:3260 -pd ffffffff -send $junk -wait 5s 2>&1); echo "$out"
if echo "$out" | grep -q '^BADCM: ACCEPTED reply=c0'; then
  result iser-cm PASS "accepted with reply flags c0 (ZBVA not used, Send with Invalidate not used), as Linux isert"
else
  result iser-cm FAIL "$out"
fi
if echo "$out" | grep -qE '^BADCM: (CLOSED|RECV)'; then
  result iser-junk PASS "$(echo "$out" | grep -E '^BADCM: (CLOSED|RECV)' | head -2 | tr '\n' ' ')"
else
  result iser-junk FAIL "the target neither answered nor closed: $out"
fi
alive iser-junk
# SRP: a good login followed by junk instead of an IU (opcode ee): the
# target answers with an SRP_T_LOGOUT (opcode 80) and ends the channel.
echo; echo "=== srp-junk"
out=$(badcm -addr $LAB_IP:5555 -pd "$(login 00 00002044 $IDEXT$IOC)" -send $junk -wait 5s 2>&1); echo "$out"
if echo "$out" | grep -q '^BADCM: ACCEPTED reply=c0'; then result srp-login PASS "SRP_LOGIN_RSP (c0) in the accept"; else result srp-login FAIL "$out"; fi
if echo "$out" | grep -q '^BADCM: RECV len=16 data=80' && echo "$out" | grep -q '^BADCM: CLOSED'; then result srp-junk PASS "$(echo "$out" | grep -E '^BADCM: (CLOSED|RECV)' | head -2 | tr '\n' ' ')"; else result srp-junk FAIL "$out"; fi
alive srp-junk

# The target still serves good hosts.
for u in nvme://$LAB_IP:4420/$NQN/1 srp://$LAB_IP:5555/$IDEXT/$IOC/0 iser://$LAB_IP:3260/$IQN/0; do
  p=${u%%:*}
  rdisk --rdma verbs bench $u --rw randrw --verify --bs 4KiB --qd 8 --runtime 2s --size 16MiB --json > /tmp/good-$p.json 2> /tmp/good-$p.err; rc=$?
  errs=$(sed -n 's/^ *"errors": *\([0-9]*\).*/\1/p' /tmp/good-$p.json | head -1)
  verrs=$(sed -n 's/^ *"verify_errors": *\([0-9]*\).*/\1/p' /tmp/good-$p.json | head -1)
  ios=$(sed -n 's/^ *"ios": *\([0-9]*\).*/\1/p' /tmp/good-$p.json | head -1)
  if [ $rc = 0 ] && [ "${ios:-0}" -gt 0 ] && [ "$errs" = 0 ] && [ "$verrs" = 0 ]; then result good-$p PASS "ios=$ios after the bad peers"; else result good-$p FAIL "rc=$rc: $(tail -c 300 /tmp/good-$p.err)"; fi
done
echo "--- what the target logged about the bad peers"
grep -E 'refused|reject|Reject|invalid|malformed|protocol' /tmp/target.log | head -30
n=$(grep -cE 'level=WARN msg="(nvmeof: connection refused|srp: login refused)' /tmp/target.log)
[ "$n" -ge 8 ] && result target-logged PASS "$n refusals logged" || result target-logged FAIL "$n refusal lines in the target log, want 8"
kill -INT $TPID; i=0; while [ $i -lt 100 ] && kill -0 $TPID 2>/dev/null; do i=$((i+1)); sleep 0.2; done
wait $TPID; rc=$?
[ $rc = 0 ] && result target-stop PASS "exit 0" || result target-stop FAIL "exit $rc"
echo
echo "=== summary ==="
cat $SUMMARY
if [ $failed = 0 ]; then echo "BADIN: PASS"; else echo "BADIN: FAIL"; fi
exit $failed
