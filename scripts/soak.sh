#!/usr/bin/env bash
# soak.sh: connect/I-O/disconnect churn against one `rdisk target`, on
# loopback only, bounded in time.
#
# One target process (a 256 MiB file) serves NVMe/RDMA + NVMe/TCP, the
# iSCSI/iSER portal and SRP on 127.0.0.1 (ports chosen by the kernel); one
# initiator daemon process serves the sessions. While `rdisk bench --verify`
# runs a random read/write verify load over NVMe/TCP on the first 64 MiB,
# each cycle, for each URL scheme in turn, does
#   rdisk connect SCHEME://... --nbd unix:...        (a new session)
#   qemu-io: read back the previous cycle's pattern (it survived the
#            disconnect), write this cycle's 256 KiB pattern, read it back
#   rdisk disconnect
# on its own 16 MiB region past the bench's. The target's (and the
# daemon's) RSS, open fds and threads are read from /proc/PID before the
# cycles, halfway and after; the last line says whether anything grew
# beyond noise between halfway and the end (the first half warms up: Go's
# threads and heap settle), and from before to after.
#
# Usage: scripts/soak.sh [-n CYCLES] [-t SECONDS] [--schemes "nvme nvme+tcp iser iscsi srp"]
#                        [--rdisk PATH] [--json] [--keep]
#   -n CYCLES    cycles per scheme (default 50)
#   -t SECONDS   time limit for the cycles (default 300); the run stops at
#                the limit and says how many cycles it did
#   --json       print one JSON object instead of the table
#   --rdisk PATH use this binary (default: go build ./cmd/rdisk into the work dir)
#   --keep       keep the work directory (logs) even when all went well
# Exit status: 0 when every cycle passed, the verify load had no error and
# nothing grew; 1 otherwise; 2 on bad usage or a missing tool.
set -euo pipefail

cycles=50
limit=300
schemes="nvme nvme+tcp iser iscsi srp"
json=0
keep=0
rdisk=""

usage() { sed -n '2,/^set -euo/p' "$0" | sed -e '/^set -euo/d' -e 's/^# \{0,1\}//'; exit 2; }
while [ $# -gt 0 ]; do
	case "$1" in
	-n) cycles="$2"; shift 2 ;;
	-t) limit="$2"; shift 2 ;;
	--schemes) schemes="$2"; shift 2 ;;
	--rdisk) rdisk="$2"; shift 2 ;;
	--json) json=1; shift ;;
	--keep) keep=1; shift ;;
	-h | --help) usage ;;
	*) echo "soak.sh: unknown argument $1" >&2; usage ;;
	esac
done
case "$cycles$limit" in *[!0-9]*) echo "soak.sh: -n and -t take whole numbers" >&2; exit 2 ;; esac
[ "$cycles" -ge 1 ] || { echo "soak.sh: -n must be at least 1" >&2; exit 2; }
for s in $schemes; do
	case "$s" in
	nvme | nvme+tcp | iser | iscsi | srp) ;;
	*) echo "soak.sh: unknown scheme $s" >&2; exit 2 ;;
	esac
done
command -v qemu-io >/dev/null || { echo "soak.sh: qemu-io is needed (apt-get install qemu-utils)" >&2; exit 2; }
command -v jq >/dev/null || { echo "soak.sh: jq is needed (apt-get install jq)" >&2; exit 2; }

work=$(mktemp -d /tmp/rdisk-soak.XXXXXX)
pids=()
cleanup() {
	local rc=$?
	# Last started first: the load and the daemon (whose sessions flush as
	# they stop) before the target.
	for ((j = ${#pids[@]} - 1; j >= 0; j--)); do
		kill "${pids[j]}" 2>/dev/null || true
		wait "${pids[j]}" 2>/dev/null || true
	done
	if [ "$rc" -eq 0 ] && [ "$keep" -eq 0 ]; then rm -rf "$work"; else echo "soak.sh: logs in $work" >&2; fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log() { [ "$json" -eq 1 ] || echo "$@"; }

if [ -z "$rdisk" ]; then
	cd "$(dirname "$0")/.."
	go build -o "$work/rdisk" ./cmd/rdisk
	rdisk="$work/rdisk"
fi
hostflags=(--hostnqn nqn.2014-08.org.nvmexpress:uuid:6a1b2c3d-0000-4000-8000-00000000500a --hostid 6a1b2c3d-0000-4000-8000-00000000500a)

"$rdisk" --log-level warn target --file "$work/disk.img" --size 256MiB \
	--listen 127.0.0.1:0 --iscsi-listen 127.0.0.1:0 --srp-listen 127.0.0.1:0 \
	--discovery-listen= --admin-socket= >"$work/target.out" 2>"$work/target.log" &
tpid=$!
pids+=("$tpid")
for _ in $(seq 100); do grep -q 'srp://' "$work/target.out" 2>/dev/null && break; sleep 0.1; done
grep -q 'srp://' "$work/target.out" || { echo "soak.sh: the target did not start" >&2; cat "$work/target.log" >&2; exit 1; }
declare -A url
for s in $schemes; do
	url[$s]=$(grep -oE "(^|[[:space:]])$(printf %s "$s" | sed 's/+/\\+/')://[^[:space:]]+/[^[:space:]]+" "$work/target.out" | head -1 | tr -d '[:space:]')
	[ -n "${url[$s]}" ] || { echo "soak.sh: the target printed no $s:// URL" >&2; exit 1; }
done

ctl="$work/initiator.sock"
"$rdisk" --log-level warn daemon --control "$ctl" --reconnect-delay 100ms "${hostflags[@]}" >"$work/daemon.log" 2>&1 &
dpid=$!
pids+=("$dpid")
for _ in $(seq 100); do [ -S "$ctl" ] && break; sleep 0.1; done
[ -S "$ctl" ] || { echo "soak.sh: the daemon did not start" >&2; cat "$work/daemon.log" >&2; exit 1; }

# The verify load: its own NVMe/TCP connection, the first 64 MiB, until
# the cycles are done (SIGINT), then it reads back everything it wrote.
tcpurl=$(grep -oE 'nvme\+tcp://[^[:space:]]+/[^[:space:]]+' "$work/target.out" | head -1)
"$rdisk" --log-level warn bench "$tcpurl" --rw randrw --verify --size 64MiB --bs 4KiB --qd 2 \
	--runtime $((limit + 600))s --json -q "${hostflags[@]}" >"$work/bench.json" 2>"$work/bench.log" &
bpid=$!
pids+=("$bpid")
sleep 2

# snap PID: "rss_kib fds threads"
snap() {
	local rss thr fds
	[ -r "/proc/$1/status" ] || { echo "0 0 0"; return; }
	rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$1/status")
	thr=$(awk '/^Threads:/ {print $2}' "/proc/$1/status")
	fds=$(ls "/proc/$1/fd" | wc -l)
	echo "$rss $fds $thr"
}
declare -A at
take() { at[$1.target]=$(snap "$tpid"); at[$1.daemon]=$(snap "$dpid"); }
show() {
	local t d
	read -r -a t <<<"${at[$1.target]}"
	read -r -a d <<<"${at[$1.daemon]}"
	log "$(printf '%-8s target: rss %7d KiB  fds %4d  threads %3d   daemon: rss %7d KiB  fds %4d  threads %3d' \
		"$1" "${t[0]}" "${t[1]}" "${t[2]}" "${d[0]}" "${d[1]}" "${d[2]}")"
}

log "soak: $cycles cycles per scheme ($schemes), time limit ${limit}s, work dir $work"
take before
show before

declare -A done_ fails lastpat
for s in $schemes; do done_[$s]=0; fails[$s]=0; lastpat[$s]=""; done
firstfail=""
half=$(((cycles + 1) / 2))
start=$(date +%s)
timedout=0
i=0
halfway_taken=0
for ((i = 1; i <= cycles; i++)); do
	if [ $(($(date +%s) - start)) -ge "$limit" ]; then timedout=1; break; fi
	k=0
	for s in $schemes; do
		k=$((k + 1))
		off=$((64 + 16 * k))M
		pat=$((i % 250 + 1))
		prev=${lastpat[$s]}
		nbd="$work/c$k.nbd"
		ok=1
		if ! out=$("$rdisk" --log-level warn connect --control "$ctl" --name "c$k" --nbd "unix:$nbd" "${hostflags[@]}" "${url[$s]}" 2>&1); then
			ok=0
			why="connect: $out"
		else
			cmds=()
			[ -z "$prev" ] || cmds+=(-c "read -P $prev $off 256k")
			cmds+=(-c "write -P $pat $off 256k" -c "read -P $pat $off 256k")
			if ! out=$(qemu-io --image-opts "driver=nbd,server.type=unix,server.path=$nbd,export=c$k" "${cmds[@]}" 2>&1) ||
				grep -q -i 'fail\|error' <<<"$out"; then
				ok=0
				why="qemu-io: $out"
			fi
			if ! dout=$("$rdisk" --log-level warn disconnect --control "$ctl" "c$k" 2>&1); then
				ok=0
				why="disconnect: $dout"
			fi
		fi
		done_[$s]=$((done_[$s] + 1))
		if [ "$ok" -eq 0 ]; then
			fails[$s]=$((fails[$s] + 1))
			why=$(tr '\n' ' ' <<<"$why")
			[ -n "$firstfail" ] || firstfail="$s cycle $i: ${why:0:400}"
			echo "soak: $s cycle $i failed: ${why:0:400}" >&2
			lastpat[$s]="" # the next cycle cannot expect this one's pattern
		else
			lastpat[$s]=$pat
		fi
	done
	if ! kill -0 "$tpid" 2>/dev/null || ! kill -0 "$dpid" 2>/dev/null; then
		echo "soak: the target or the daemon died in round $i" >&2
		break
	fi
	if [ $((i % 100)) -eq 0 ]; then echo "soak: $i cycles per scheme in $(($(date +%s) - start))s" >&2; fi
	if [ "$i" -eq "$half" ]; then
		take halfway
		show halfway
		halfway_taken=1
	fi
done
elapsed=$(($(date +%s) - start))
[ "$halfway_taken" -eq 1 ] || { take halfway; show halfway; }
sleep 2 # let closed connections finish closing
take after
show after

kill -INT "$bpid" 2>/dev/null || true
bench_rc=0
wait "$bpid" || bench_rc=$?
pids=("$tpid" "$dpid") # the load is reaped: its PID is no longer ours to signal
benchline=$(jq -r '"\(.ios) I/Os, \(.iops|floor) IOPS, \(.errors) errors, \(.verified_blocks) blocks verified, \(.verify_errors) verify errors"' "$work/bench.json" 2>/dev/null || echo "no result")
bench_ok=0
if [ "$bench_rc" -eq 0 ] && [ "$(jq -r '.errors + .verify_errors' "$work/bench.json" 2>/dev/null)" = 0 ]; then bench_ok=1; fi

# Growth beyond noise: RSS by more than 16 MiB + 20%, fds or threads by
# more than 8, from halfway to after (and, more loosely, from before to
# after: 32 MiB + 50%, 16).
grew=()
judge() { # who metric name before half after
	local who=$1 name=$2 b=$3 h=$4 a=$5 tight loose
	if [ "$name" = rss ]; then
		tight=$((16384 + h / 5))
		loose=$((32768 + b / 2))
	else
		tight=8
		loose=16
	fi
	if [ $((a - h)) -gt "$tight" ] || [ $((a - b)) -gt "$loose" ]; then grew+=("$who $name $b -> $h -> $a"); fi
}
for who in target daemon; do
	read -r -a B <<<"${at[before.$who]}"
	read -r -a H <<<"${at[halfway.$who]}"
	read -r -a A <<<"${at[after.$who]}"
	judge "$who" rss "${B[0]}" "${H[0]}" "${A[0]}"
	judge "$who" fds "${B[1]}" "${H[1]}" "${A[1]}"
	judge "$who" threads "${B[2]}" "${H[2]}" "${A[2]}"
done

totalfails=0
summary=""
for s in $schemes; do
	totalfails=$((totalfails + fails[$s]))
	summary+="$s ${done_[$s]} cycles ${fails[$s]} failed; "
done
alive=1
kill -0 "$tpid" 2>/dev/null || alive=0
kill -0 "$dpid" 2>/dev/null || alive=0

if [ ${#grew[@]} -eq 0 ]; then verdict="nothing grew beyond noise"; else verdict="GREW: $(IFS=';'; echo "${grew[*]}")"; fi
[ "$alive" -eq 1 ] || verdict="a process died; $verdict"
[ "$bench_ok" -eq 1 ] || verdict="the verify load failed; $verdict"
[ "$totalfails" -eq 0 ] || verdict="$totalfails cycles failed; $verdict"
rc=0
{ [ "$totalfails" -eq 0 ] && [ ${#grew[@]} -eq 0 ] && [ "$bench_ok" -eq 1 ] && [ "$alive" -eq 1 ]; } || rc=1

if [ "$json" -eq 1 ]; then
	obj() { read -r -a v <<<"$1"; printf '{"rss_kib": %d, "fds": %d, "threads": %d}' "${v[0]}" "${v[1]}" "${v[2]}"; }
	{
		printf '{"cycles_requested": %d, "time_limit_s": %d, "elapsed_s": %d, "timed_out": %s,\n' "$cycles" "$limit" "$elapsed" "$([ $timedout -eq 1 ] && echo true || echo false)"
		printf ' "schemes": {'
		sep=""
		for s in $schemes; do printf '%s"%s": {"url": "%s", "cycles": %d, "failed": %d}' "$sep" "$s" "${url[$s]}" "${done_[$s]}" "${fails[$s]}"; sep=", "; done
		printf '},\n'
		for who in target daemon; do
			printf ' "%s": {"before": %s, "halfway": %s, "after": %s},\n' "$who" "$(obj "${at[before.$who]}")" "$(obj "${at[halfway.$who]}")" "$(obj "${at[after.$who]}")"
		done
		printf ' "verify_load": %s,\n' "$(jq -c '{ios, iops, errors, verified_blocks, verify_errors}' "$work/bench.json" 2>/dev/null || echo null)"
		printf ' "first_failure": %s, "processes_alive": %s, "grew": %s, "ok": %s}\n' \
			"$(jq -Rn --arg s "$firstfail" '$s')" "$([ $alive -eq 1 ] && echo true || echo false)" \
			"$(printf '%s\n' "${grew[@]}" | jq -R . | jq -cs 'map(select(. != ""))')" "$([ $rc -eq 0 ] && echo true || echo false)"
	}
else
	log "cycles: ${summary%; } in ${elapsed}s$([ $timedout -eq 1 ] && echo " (stopped at the ${limit}s limit)")"
	log "verify load: $benchline"
	[ -z "$firstfail" ] || log "first failure: $firstfail"
	[ "$alive" -eq 1 ] || log "a process died: see $work"
	log "soak: $([ $rc -eq 0 ] && echo PASS || echo FAIL): $verdict (target and daemon RSS, fds, threads; before/halfway/after above)"
fi
exit "$rc"
