#!/usr/bin/env bash
# Interleaved A/B of two rdisk binaries (or git revisions) on loopback, the
# way speed is compared when restructuring: per round the raw TCP stream and
# 64 B -> 4 KiB request/response baselines (../shared/peers/gotools, when
# present), then for each protocol both builds (order flipped every round)
# run rdisk bench against their own rdisk target: 4 KiB randread QD32 on 1
# and 4 queues, 128 KiB sequential read and write QD8. Compare ratios within
# a round. Usage:
#   scripts/bench-ab.sh OLD NEW [ROUNDS] [SECONDS] ["nvme iser srp"]
# OLD and NEW are rdisk binaries or git revisions of this repository.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
R=${3:-5}; D=${4:-3}; PROTOS=${5:-"nvme iser srp"}
tmp=$(mktemp -d); trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$tmp"' EXIT
bin() { # bin NAME REV-OR-PATH
	if [[ -x $2 ]]; then echo "$2"; return; fi
	git -C "$ROOT" worktree add -q --detach "$tmp/$1" "$2" >/dev/null && (cd "$tmp/$1" && go build -o "$tmp/rdisk-$1" ./cmd/rdisk) &&
		git -C "$ROOT" worktree remove --force "$tmp/$1" && echo "$tmp/rdisk-$1"
}
OLD=$(bin old "$1") || exit 1; NEW=$(bin new "$2") || exit 1
TOOLS=$ROOT/../shared/peers/gotools
raw=0
if [[ -d $TOOLS ]] && (cd "$TOOLS" && go build -o "$tmp/tcpstream" ./tcpstream && go build -o "$tmp/pingpong" ./pingpong); then raw=1; fi
val() { echo "$1" | awk -F'[:,]' -v k="\"$2\"" '$1 ~ k {gsub(/ /,"",$2); print $2; exit}'; }
port=30000
for round in $(seq 1 "$R"); do
	port=$((port+10))
	if ((raw)); then
		"$tmp/tcpstream" -mode recv -addr 127.0.0.1:$port >/dev/null 2>&1 & p1=$!; sleep 0.2
		st=$("$tmp/tcpstream" -mode send -addr 127.0.0.1:$port -dur "${D}s" -wsize 131072 | tail -1 | grep -ao 'Gbit_per_s=[0-9.]*' | cut -d= -f2); kill $p1 2>/dev/null
		"$tmp/pingpong" -mode server -addr 127.0.0.1:$((port+1)) -conns 1 -resp 4096 >/dev/null 2>&1 & p2=$!; sleep 0.2
		pp1=$("$tmp/pingpong" -mode client -addr 127.0.0.1:$((port+1)) -conns 1 -depth 32 -resp 4096 -dur "${D}s" | tail -1 | grep -ao 'rps=[0-9.]*' | cut -d= -f2); kill $p2 2>/dev/null
		"$tmp/pingpong" -mode server -addr 127.0.0.1:$((port+2)) -conns 4 -resp 4096 >/dev/null 2>&1 & p3=$!; sleep 0.2
		pp4=$("$tmp/pingpong" -mode client -addr 127.0.0.1:$((port+2)) -conns 4 -depth 32 -resp 4096 -dur "${D}s" | tail -1 | grep -ao 'rps=[0-9.]*' | cut -d= -f2); kill $p3 2>/dev/null
		echo "ROUND $round raw: stream=${st}Gbit/s pingpong1=${pp1} pingpong4=${pp4}"
	else
		echo "ROUND $round (raw TCP baselines skipped: ../shared/peers/gotools not found)"
	fi
	order="OLD NEW"; ((round % 2 == 0)) && order="NEW OLD"
	for P in $PROTOS; do
		for b in $order; do
			exe=${!b}; port=$((port+10))
			case $P in
			nvme) U=nvme://127.0.0.1:$port/nqn.2026-11.io.rdisk:default/1; args=(--iscsi-listen "" --srp-listen "");;
			iser) U=iser://127.0.0.1:$((port+1))/iqn.2026-11.io.rdisk:default/0; args=(--iscsi-listen 127.0.0.1:$((port+1)) --srp-listen "");;
			srp) U=srp://127.0.0.1:$((port+2))/0000000000000001/726469736b000001; args=(--iscsi-listen "" --srp-listen 127.0.0.1:$((port+2)));;
			*) echo "unknown protocol $P" >&2; exit 2;;
			esac
			"$exe" target --listen 127.0.0.1:$port "${args[@]}" >/dev/null 2>&1 & tp=$!
			sleep 0.7
			"$exe" bench "$U" --rw write --bs 128KiB --qd 8 --runtime 2s -q --size 256MiB >/dev/null 2>&1
			line="$P $b r$round"
			for a in "--rw randread --bs 4KiB --qd 32 --jobs 1" "--rw randread --bs 4KiB --qd 32 --jobs 4" "--rw read --bs 128KiB --qd 8" "--rw write --bs 128KiB --qd 8"; do
				out=$("$exe" bench "$U" $a --runtime "${D}s" -q --size 256MiB --json 2>/dev/null)
				iops=$(val "$out" iops); bw=$(val "$out" bw_bytes_per_sec); er=$(val "$out" errors)
				line="$line | $(awk -v i="${iops:-0}" -v b="${bw:-0}" 'BEGIN{printf "%.1fk %.2fGB/s", i/1000, b/1e9}') e=${er:-?}"
			done
			echo "$line"
			kill $tp; wait $tp 2>/dev/null
		done
	done
done
