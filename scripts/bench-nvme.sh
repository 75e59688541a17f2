#!/usr/bin/env bash
# One run of the NVMe-oF speed goals next to their baselines, on loopback:
#   raw TCP stream and 64 B -> 4 KiB request/response at depth 32 (the peers'
#   tcpstream and pingpong tools from ../shared/peers/gotools, when present),
#   rdisk rdma-perf, then rdisk bench against rdisk target (RAM disk):
#   4 KiB randread QD32 with 1 and 4 queues, 128 KiB sequential read and
#   write QD8, over NVMe/RDMA and NVMe/TCP (one target port serves both),
#   and the goal ratios of this run (4 KiB 1 queue vs the TCP
#   request/response rate, 128 KiB read and write vs the TCP stream).
#   Quote ratios from one run of this script.
# Usage: scripts/bench-nvme.sh [SECONDS]   (default 5)
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DUR=${1:-5}
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; rm -rf "$tmp"; }
trap cleanup EXIT
(cd "$ROOT" && go build -o "$tmp/rdisk" ./cmd/rdisk) || exit 1
R=$tmp/rdisk
TOOLS=$ROOT/../shared/peers/gotools
if [[ -d $TOOLS ]] && (cd "$TOOLS" && go build -o "$tmp/tcpstream" ./tcpstream && go build -o "$tmp/pingpong" ./pingpong); then
	echo "== raw TCP stream (128 KiB writes, ${DUR}s)"
	"$tmp/tcpstream" -mode recv -addr 127.0.0.1:15301 >/dev/null & pids+=($!); sleep 0.3
	"$tmp/tcpstream" -mode send -addr 127.0.0.1:15301 -dur "${DUR}s" -wsize 131072 | tail -1 | tee "$tmp/stream.out"
	echo "== raw TCP request/response 64 B -> 4 KiB, depth 32, 1 connection"
	"$tmp/pingpong" -mode server -addr 127.0.0.1:15402 -conns 1 -resp 4096 >/dev/null & pids+=($!); sleep 0.3
	"$tmp/pingpong" -mode client -addr 127.0.0.1:15402 -conns 1 -depth 32 -resp 4096 -dur "${DUR}s" | tail -1 | tee "$tmp/pingpong.out"
else
	echo "== raw TCP baselines skipped: ../shared/peers/gotools not found"
fi
echo "== rdisk rdma-perf"
"$R" rdma-perf server --listen 127.0.0.1:17471 >/dev/null 2>&1 & pids+=($!); sleep 0.5
for a in "--op write --size 128KiB --qd 16" "--op read --size 128KiB --qd 16" "--op read --size 128KiB --qd 8" "--op read --size 4KiB --qd 32" "--op send --size 64 --qd 1"; do
	"$R" rdma-perf client 127.0.0.1:17471 $a --duration "${DUR}s"
done
echo "== rdisk bench against rdisk target (1 GiB RAM disk)"
"$R" target --listen 127.0.0.1:14421 --iscsi-listen "" --srp-listen "" >/dev/null 2>&1 & pids+=($!); sleep 1
U_rdma=nvme://127.0.0.1:14421/nqn.2026-11.io.rdisk:default/1
U_tcp=nvme+tcp://127.0.0.1:14421/nqn.2026-11.io.rdisk:default/1
"$R" bench $U_rdma --rw write --bs 128KiB --qd 8 --runtime 3s -q --size 256MiB >/dev/null
# The same target port serves NVMe/RDMA (software iWARP) and NVMe/TCP.
for tr in rdma tcp; do
	U=U_$tr; U=${!U}
	echo "== $U"
	i=0
	for a in "--rw randread --bs 4KiB --qd 32 --jobs 1" "--rw randread --bs 4KiB --qd 32 --jobs 4" "--rw read --bs 128KiB --qd 8 --jobs 1" "--rw write --bs 128KiB --qd 8 --jobs 1"; do
		echo "-- rdisk bench $a"
		"$R" bench $U $a --runtime "${DUR}s" -q --size 256MiB --json > "$tmp/bench_$tr$i.json"
		awk -F'[:,]' '/^  "iops"/ {iops=$2} /^  "bw_bytes_per_sec"/ {bw=$2} /^  "errors"/ {err=$2}
			END {printf "  IOPS=%.1fk BW=%.2f GB/s errors=%d\n", iops/1000, bw/1e9, err}' "$tmp/bench_$tr$i.json"
		i=$((i+1))
	done
done
if [[ -s $tmp/stream.out && -s $tmp/pingpong.out ]]; then
	val() { grep -o "\"$2\": [0-9.e+]*" "$1" | head -1 | awk '{print $2}'; }
	stream=$(grep -ao 'Gbit_per_s=[0-9.]*' "$tmp/stream.out" | cut -d= -f2)
	rps=$(grep -ao 'rps=[0-9.]*' "$tmp/pingpong.out" | cut -d= -f2)
	awk -v iops="$(val "$tmp/bench_rdma0.json" iops)" -v rps="$rps" -v bw="$(val "$tmp/bench_rdma2.json" bw_bytes_per_sec)" -v gbit="$stream" 'BEGIN {
		printf "== goals (this run), NVMe/RDMA: 4 KiB 1 queue = %.1f%% of TCP req/resp (goal 35%%); 128 KiB read = %.1f%% of TCP stream (goal 70%%)\n",
			100*iops/rps, 100*bw*8/(gbit*1e9) }'
	awk -v iops="$(val "$tmp/bench_tcp0.json" iops)" -v rps="$rps" -v rbw="$(val "$tmp/bench_tcp2.json" bw_bytes_per_sec)" -v wbw="$(val "$tmp/bench_tcp3.json" bw_bytes_per_sec)" -v gbit="$stream" 'BEGIN {
		printf "== goals (this run), NVMe/TCP: 4 KiB 1 queue = %.1f%% of TCP req/resp (goal 55%%); 128 KiB read = %.1f%% (goal 95%%), write = %.1f%% (goal 85%%) of TCP stream\n",
			100*iops/rps, 100*rbw*8/(gbit*1e9), 100*wbw*8/(gbit*1e9) }'
fi
