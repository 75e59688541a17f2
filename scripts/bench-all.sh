#!/usr/bin/env bash
# The speed table of the project, measured side by side in one run on
# loopback: raw Go TCP baselines (test/bench/rawperf), every protocol
# through `rdisk bench` against `rdisk target` (RAM disk written in full
# first), fio's nbd engine through `rdisk connect --nbd` and against
# nbdkit's memory plugin, iscsi-perf against rdisk's iSCSI/TCP portal and
# against tgt, many hosts on one target, 4 KiB QD1 latency (pinned: both
# ends on one CPU, and on two), and a file on disk (O_DIRECT) through the
# target against local fio. Everything is
# interleaved per repetition; the table gives the median of the
# repetitions' own ratios (min-max beside it), so quote ratios, not
# absolutes. It is the benchmark, not a test.
#
#   scripts/bench-all.sh [--reps N] [--dur SECONDS] [--json] [--only ROWS] [--keep]
#     --reps N      repetitions (default 3)
#     --dur S       seconds per measurement (default 5)
#     --json        print the table as one JSON object instead of text
#     --only ROWS   comma-separated groups: raw,nvme,tcp,iser,srp,hosts,qd1,nbd,iscsi,file,mem
#                   (default: all; raw is always measured)
#     --keep        keep the work directory (logs, JSON of every run)
#
# Installs fio, nbdkit, tgt and libiscsi-bin with apt-get when missing (as
# root); rows whose peer cannot be had are reported as skipped. Uses only
# 127.0.0.1 ports 15300-15399 and processes it started (stopped by PID).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
REPS=3 DUR=5 JSON=0 ONLY=all KEEP=0
while (($#)); do
	case "$1" in
	--reps) REPS=$2; shift 2 ;;
	--dur) DUR=$2; shift 2 ;;
	--json) JSON=1; shift ;;
	--only) ONLY=$2; shift 2 ;;
	--keep) KEEP=1; shift ;;
	-h | --help) sed -n '2,24p' "$0"; exit 0 ;;
	*) echo "bench-all.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
	esac
done
[[ $REPS =~ ^[1-9][0-9]*$ ]] || { echo "bench-all.sh: --reps $REPS: want a positive integer" >&2; exit 2; }
[[ $DUR =~ ^[1-9][0-9]*$ ]] || { echo "bench-all.sh: --dur $DUR: want whole seconds, at least 1" >&2; exit 2; }
want() { [[ $ONLY == all || ,$ONLY, == *,$1,* ]]; }
log() { echo "bench-all: $*" >&2; }

W=$(mktemp -d /tmp/rdisk-bench-all.XXXXXX)
pids=()
cleanup() {
	[[ -x $W/rdisk ]] && "$W/rdisk" disconnect --all --control "$W/ctl.sock" >/dev/null 2>&1
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
	sleep 0.5
	for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done # tgtd ignores SIGTERM
	wait 2>/dev/null
	[[ -n ${LOOP:-} ]] && losetup -d "$LOOP"
	((KEEP)) && { log "work directory kept: $W"; return; }
	rm -rf "$W"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- tools -------------------------------------------------------------
need=()
want nbd && { command -v fio >/dev/null || need+=(fio); command -v nbdkit >/dev/null || need+=(nbdkit); }
want file && { command -v fio >/dev/null || need+=(fio); }
want iscsi && { command -v iscsi-perf >/dev/null || need+=(libiscsi-bin); command -v tgtd >/dev/null || need+=(tgt); }
if ((${#need[@]})) && [[ $(id -u) == 0 ]]; then
	log "installing ${need[*]}"
	{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"; } >/dev/null 2>&1 || log "apt-get install ${need[*]} failed: those rows skip"
fi
(cd "$ROOT" && go build -o "$W/rdisk" ./cmd/rdisk && go build -o "$W/rawperf" ./test/bench/rawperf) || exit 1
R=$W/rdisk RP=$W/rawperf
NQN=nqn.2026-11.io.rdisk:default IQN=iqn.2026-11.io.rdisk:default

# Results: one line per measurement, "rep key value" (value: IOPS, bytes/s,
# microseconds or KiB as the key says).
RES=$W/results
put() { echo "$REP $1 $2" >>"$RES"; }

waitfor() { # waitfor FILE PATTERN: until the log says it serves (10 s)
	for _ in $(seq 100); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
	log "timed out waiting for '$2' in $1:"; tail -5 "$1" >&2; return 1
}
jnum() { python3 -c 'import json,sys
d=json.load(open(sys.argv[1]))
for k in sys.argv[2].split("."): d=d[int(k)] if isinstance(d, list) else d[k]
print(d)' "$1" "$2" 2>/dev/null || echo 0; }
bench() { # bench KEY FIELD URL ARGS...: rdisk bench, record FIELD of its JSON
	local key=$1 field=$2 url=$3; shift 3
	local out=$W/r$REP-$key.json
	local pin=()
	[[ -n ${BENCH_CPU:-} ]] && pin=(taskset -c "$BENCH_CPU")
	if "${pin[@]}" "$R" --log-level error bench "$url" --runtime "${DUR}s" -q --size 512MiB --json "$@" >"$out" 2>"$out.err"; then
		put "$key" "$(jnum "$out" "$field")"
		if [[ $key == hosts* ]]; then
			put "$key.minmax" "$(python3 -c 'import json,sys
h=[x["iops"] for x in json.load(open(sys.argv[1]))["hosts"]]
print(min(h)/max(h) if max(h) else 0)' "$out")"
		fi
	else
		log "rdisk bench $key failed: $(tail -1 "$out.err")"
	fi
}
raw_stream() {
	"$RP" stream-recv -addr 127.0.0.1:15301 >/dev/null & local p=$!
	put raw.stream "$("$RP" stream-send -addr 127.0.0.1:15301 -dur "${DUR}s" | grep -o 'bw_bytes_per_sec=[0-9]*' | cut -d= -f2)"
	wait "$p"
}
raw_pp() { # raw_pp KEY CONNS DEPTH [SERVER_CPU CLIENT_CPU]
	local ts=() tc=()
	(($# == 5)) && ts=(taskset -c "$4") tc=(taskset -c "$5")
	"${ts[@]}" "$RP" pp-server -addr 127.0.0.1:15302 -conns "$2" >/dev/null & local p=$!
	local line; line=$("${tc[@]}" "$RP" pp-client -addr 127.0.0.1:15302 -conns "$2" -depth "$3" -dur "${DUR}s")
	wait "$p"
	put "$1" "$(grep -o 'rps=[0-9]*' <<<"$line" | cut -d= -f2)"
	if [[ $3 == 1 ]]; then
		put "$1.p50" "$(grep -o 'p50_us=[0-9.]*' <<<"$line" | cut -d= -f2)"
		put "$1.p99" "$(grep -o 'p99_us=[0-9.]*' <<<"$line" | cut -d= -f2)"
	fi
}
fio_nbd() { # fio_nbd KEY NBD_URI
	local out=$W/r$REP-$1.json
	if NBD_URI="$2" SIZE=512M RUNTIME="$DUR" fio --output-format=json --output="$out" "$ROOT/deploy/fio/randread-4k.fio" >/dev/null 2>"$out.err"; then
		put "$1" "$(jnum "$out" jobs.0.read.iops)"
	else
		log "fio $1 failed: $(tail -1 "$out.err")"
	fi
}
iscsi_perf() { # iscsi_perf KEY URL: 4 KiB random reads at QD32
	local out=$W/r$REP-$1.txt
	timeout -k 5 $((DUR + 30)) iscsi-perf -r -m 32 -b 8 -t "$DUR" "$2" >"$out" 2>&1
	# iscsi-perf redraws "iops current N (...), iops average N (...)" with
	# carriage returns and ends with the run's "iops average N": take that.
	local v; v=$(tr '\r' '\n' <"$out" | grep -o 'iops average [0-9]*' | tail -1 | awk '{print $3}')
	if [[ -n $v ]]; then put "$1" "$v"; else log "iscsi-perf $1: no rate in its output: $(tail -2 "$out" | tr '\n' ' ')"; fi
}
rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }
jgrep() { jnum "$@"; }

# --- the target under test (RAM disk, every protocol) -------------------
"$R" target --listen 127.0.0.1:15310 --discovery-listen "" --iscsi-listen 127.0.0.1:15311 --srp-listen 127.0.0.1:15312 \
	--size 1GiB >"$W/target.log" 2>&1 & TPID=$!; pids+=($TPID)
waitfor "$W/target.log" "serving SRP" || exit 1
U_RDMA=nvme://127.0.0.1:15310/$NQN/1 U_TCP=nvme+tcp://127.0.0.1:15310/$NQN/1
U_ISER=iser://127.0.0.1:15311/$IQN/0 U_ISCSI=iscsi://127.0.0.1:15311/$IQN/0
U_SRP=$(grep -o 'srp://127.0.0.1:15312/[0-9a-f/]*' "$W/target.log" | head -1)/0
log "writing the RAM disk in full"
"$R" --log-level error bench "$U_RDMA" --rw write --bs 1MiB --qd 8 --runtime 60s -q --size 1GiB >/dev/null 2>&1

if want nbd && command -v fio >/dev/null && fio --enghelp 2>/dev/null | grep -qx '[[:space:]]*nbd'; then
	NBD_RDISK="nbd+unix:///bench?socket=$W/bench.nbd"
	if command -v nbdkit >/dev/null; then
		nbdkit --foreground --unix "$W/nbdkit.sock" memory size=1G & pids+=($!)
		for _ in $(seq 50); do [[ -S $W/nbdkit.sock ]] && break; sleep 0.1; done
		NBD_KIT="nbd+unix:///?socket=$W/nbdkit.sock"
		# Written in full first, as the RAM disk.
		NBD_URI=$NBD_KIT SIZE=1G fio --name=fill --ioengine=nbd --uri="$NBD_KIT" --rw=write --bs=1M --size=1G >/dev/null 2>&1
	fi
fi
if want iscsi && command -v tgtd >/dev/null && command -v iscsi-perf >/dev/null; then
	dd if=/dev/urandom of=/dev/shm/rdisk-bench-all-tgt.img bs=1M count=1024 status=none
	tgtd -f --iscsi portal=127.0.0.1:15313 >"$W/tgtd.log" 2>&1 & pids+=($!)
	sleep 1
	{ tgtadm --lld iscsi --mode target --op new --tid 1 --targetname iqn.2026-12.io.rdisk.bench:tgt &&
		tgtadm --lld iscsi --mode logicalunit --op new --tid 1 --lun 1 --backing-store /dev/shm/rdisk-bench-all-tgt.img --bstype rdwr &&
		tgtadm --lld iscsi --mode target --op bind --tid 1 --initiator-address 127.0.0.1; } >>"$W/tgtd.log" 2>&1 &&
		U_TGT=iscsi://127.0.0.1:15313/iqn.2026-12.io.rdisk.bench:tgt/1 || log "tgt setup failed: $(tail -2 "$W/tgtd.log")"
	rm -f /dev/shm/rdisk-bench-all-tgt.img # tgtd keeps it open
fi
if want qd1 && command -v taskset >/dev/null && (($(nproc) >= 2)); then
	# QD1 latency is measured pinned: on a VM a wake-up that crosses
	# vCPUs costs tens of microseconds, and an unpinned ping-pong lands on
	# one vCPU or two by chance (its p50 swung 8-75 us between runs here),
	# so each end's CPU is fixed for the baseline and for rdisk alike.
	taskset -c 0 "$R" target --listen 127.0.0.1:15340 --discovery-listen "" --iscsi-listen "" --srp-listen "" \
		--size 512MiB >"$W/target-qd1.log" 2>&1 & QPID=$!; pids+=($QPID)
	waitfor "$W/target-qd1.log" serving || QPID=
	U_QD1=nvme://127.0.0.1:15340/$NQN/1
	[[ -n $QPID ]] && "$R" --log-level error bench "$U_QD1" --rw write --bs 1MiB --qd 8 --runtime 30s -q --size 512MiB >/dev/null 2>&1
elif want qd1; then
	log "the QD1 rows need taskset and 2 CPUs: skipped"
fi
if want file && command -v fio >/dev/null && [[ $(id -u) == 0 ]]; then
	# A file on the work directory's file system behind a loop device with
	# direct I/O: the target opens the block device O_DIRECT, local fio
	# reads it with --direct=1.
	dd if=/dev/urandom of="$W/disk.img" bs=1M count=1024 status=none
	if LOOP=$(losetup --direct-io=on -f --show "$W/disk.img" 2>"$W/losetup.err"); then
		FILE=$LOOP
		"$R" target --listen 127.0.0.1:15320 --discovery-listen "" --iscsi-listen "" --srp-listen "" \
			--device "$LOOP" >"$W/target-file.log" 2>&1 & FPID=$!; pids+=($FPID)
		waitfor "$W/target-file.log" "serving" || FPID=
	else
		log "losetup failed ($(cat "$W/losetup.err")): the file rows skip"
	fi
fi

# --- the repetitions ------------------------------------------------------
for REP in $(seq "$REPS"); do
	log "repetition $REP of $REPS"
	raw_stream
	raw_pp raw.pp1 1 32
	raw_pp raw.pp4 4 32
	if want qd1 && [[ -n ${QPID:-} ]]; then
		raw_pp raw.pp.d1.same 1 1 0 0
		raw_pp raw.pp.d1.cross 1 1 0 1
	fi
	if want nvme; then
		bench nvme.4k.q1 iops "$U_RDMA" --rw randread --bs 4KiB --qd 32 --jobs 1
		bench nvme.4k.q4 iops "$U_RDMA" --rw randread --bs 4KiB --qd 32 --jobs 4
		bench nvme.128k.read bw_bytes_per_sec "$U_RDMA" --rw read --bs 128KiB --qd 8
		bench nvme.128k.write bw_bytes_per_sec "$U_RDMA" --rw write --bs 128KiB --qd 8
	fi
	if want tcp; then
		bench tcp.4k.q1 iops "$U_TCP" --rw randread --bs 4KiB --qd 32 --jobs 1
		bench tcp.128k.read bw_bytes_per_sec "$U_TCP" --rw read --bs 128KiB --qd 8
		bench tcp.128k.write bw_bytes_per_sec "$U_TCP" --rw write --bs 128KiB --qd 8
	fi
	if want iser; then
		bench iser.4k iops "$U_ISER" --rw randread --bs 4KiB --qd 32
		bench iser.128k.read bw_bytes_per_sec "$U_ISER" --rw read --bs 128KiB --qd 8
	fi
	if want srp && [[ $U_SRP == srp://* ]]; then
		bench srp.4k iops "$U_SRP" --rw randread --bs 4KiB --qd 32
		bench srp.128k.read bw_bytes_per_sec "$U_SRP" --rw read --bs 128KiB --qd 8
	fi
	if want hosts; then
		want nvme || bench nvme.4k.q4 iops "$U_RDMA" --rw randread --bs 4KiB --qd 32 --jobs 4
		bench hosts64x1 iops "$U_RDMA" --rw randread --bs 4KiB --qd 32 --hosts 64 --queues 1
		bench hosts16x4 iops "$U_RDMA" --rw randread --bs 4KiB --qd 32 --hosts 16 --queues 4
	fi
	if want qd1 && [[ -n ${QPID:-} ]]; then
		# The target on CPU 0, the host on CPU 0 (same) or 1 (cross), as
		# the raw ping-pong's two ends above.
		for where in "same 0" "cross 1"; do
			set -- $where
			BENCH_CPU=$2 bench "nvme.qd1.$1" lat_us.p50 "$U_QD1" --rw randread --bs 4KiB --qd 1
			[[ -s $W/r$REP-nvme.qd1.$1.json ]] && put "nvme.qd1.$1.p99" "$(jnum "$W/r$REP-nvme.qd1.$1.json" lat_us.p99)"
		done
	fi
	if [[ -n ${NBD_RDISK:-} ]]; then
		# Connected for this row only: the target gives one P to each
		# connected I/O queue, busy or not (cmd/rdisk/procs.go), so the
		# daemon's idle queues, left connected, cost the other rows'
		# single host up to a quarter here (128 KiB reads 2.8-3.1 GB/s
		# with it against 3.8-3.9 without).
		if "$R" --log-level error connect "nvme://127.0.0.1:15310/$NQN" --name bench --control "$W/ctl.sock" --nbd "unix:$W/bench.nbd" >"$W/connect.log" 2>&1; then
			fio_nbd nbd.rdisk "$NBD_RDISK"
			"$R" disconnect --all --control "$W/ctl.sock" >/dev/null 2>&1
		else
			log "rdisk connect --nbd failed: $(tail -1 "$W/connect.log")"
		fi
	fi
	if [[ -n ${NBD_KIT:-} ]]; then fio_nbd nbd.nbdkit "$NBD_KIT"; fi
	if [[ -n ${U_TGT:-} ]]; then
		iscsi_perf iscsi.rdisk "$U_ISCSI"
		iscsi_perf iscsi.tgt "$U_TGT"
	fi
	if [[ -n ${FPID:-} ]]; then
		for s in "4k randread 4KiB 32 4k" "128k read 128KiB 8 128k"; do
			set -- $s
			out=$W/r$REP-file.local.$1.json
			fio --name=local --filename="$FILE" --ioengine=io_uring --direct=1 --rw="$2" --bs="$5" --iodepth="$4" --size=1G \
				--time_based --runtime="$DUR" --output-format=json --output="$out" >/dev/null 2>&1 &&
				put "file.local.$1" "$(python3 -c 'import json,sys;r=json.load(open(sys.argv[1]))["jobs"][0]["read"];print(r["iops"] if sys.argv[2]=="4k" else r["bw_bytes"])' "$out" "$1")"
			f=iops; [[ $1 == 128k ]] && f=bw_bytes_per_sec
			bench "file.rdisk.$1" $f "nvme://127.0.0.1:15320/$NQN/1" --rw "$2" --bs "$3" --qd "$4"
		done
	fi
done

# Memory per idle connection: a fresh target, 64 idle hosts.
if want mem; then
	"$R" target --listen 127.0.0.1:15330 --discovery-listen "" --iscsi-listen "" --srp-listen "" --size 64MiB >"$W/target-mem.log" 2>&1 & MPID=$!; pids+=($MPID)
	if waitfor "$W/target-mem.log" serving; then
		sleep 1
		before=$(rss_kib $MPID)
		"$R" --log-level error bench "nvme://127.0.0.1:15330/$NQN/1" --hosts 64 --queues 1 --qd 32 --idle 4s --runtime 1s -q >/dev/null 2>&1 & BP=$!
		sleep 3
		idle=$(rss_kib $MPID)
		wait $BP
		REP=0 put mem.idle.per.conn.kib "$(((idle - before) / 64))"
		REP=0 put mem.before.kib "$before"
		REP=0 put mem.idle64.kib "$idle"
		REP=0 put mem.after.run.kib "$(rss_kib $MPID)"
	fi
fi

# --- the table -----------------------------------------------------------
python3 - "$RES" "$JSON" "$REPS" "$DUR" <<'PY'
import json, statistics, sys
path, as_json, reps, dur = sys.argv[1], sys.argv[2] == "1", int(sys.argv[3]), sys.argv[4]
vals = {}
for line in open(path):
    p = line.split()
    if len(p) == 3:
        try:
            vals.setdefault(int(p[0]), {})[p[1]] = float(p[2])
        except ValueError:
            pass
# (figure, numerator, denominator, goal, unit of the numerator)
rows = [
    ("NVMe-oF/RDMA 4 KiB randread QD32, 1 queue / raw req-resp d32, 1 conn", "nvme.4k.q1", "raw.pp1", ">= 0.50", "IOPS"),
    ("NVMe-oF/RDMA 4 KiB randread QD32, 4 queues / raw req-resp d32, 4 conns", "nvme.4k.q4", "raw.pp4", ">= 0.45", "IOPS"),
    ("NVMe-oF/RDMA 128 KiB seq read / raw TCP stream", "nvme.128k.read", "raw.stream", ">= 1.0", "B/s"),
    ("NVMe-oF/RDMA 128 KiB seq write / raw TCP stream", "nvme.128k.write", "raw.stream", ">= 0.90", "B/s"),
    ("NVMe/TCP 4 KiB randread QD32, 1 queue / raw req-resp d32", "tcp.4k.q1", "raw.pp1", "", "IOPS"),
    ("NVMe/TCP 128 KiB seq read / raw TCP stream", "tcp.128k.read", "raw.stream", "", "B/s"),
    ("NVMe/TCP 128 KiB seq write / raw TCP stream", "tcp.128k.write", "raw.stream", "", "B/s"),
    ("iSER 4 KiB randread QD32 / raw req-resp d32", "iser.4k", "raw.pp1", ">= 0.45", "IOPS"),
    ("SRP 4 KiB randread QD32 / raw req-resp d32", "srp.4k", "raw.pp1", ">= 0.45", "IOPS"),
    ("iSER 128 KiB seq read / raw TCP stream", "iser.128k.read", "raw.stream", ">= 0.95", "B/s"),
    ("SRP 128 KiB seq read / raw TCP stream", "srp.128k.read", "raw.stream", ">= 0.95", "B/s"),
    ("fio nbd 4 KiB randread QD32: rdisk connect --nbd / nbdkit memory", "nbd.rdisk", "nbd.nbdkit", ">= 0.90", "IOPS"),
    ("iscsi-perf 4 KiB randread QD32: rdisk iSCSI/TCP / tgt", "iscsi.rdisk", "iscsi.tgt", ">= 3 (keep)", "IOPS"),
    ("64 hosts x 1 queue, 4 KiB QD32 / 4-queue figure", "hosts64x1", "nvme.4k.q4", ">= 0.9", "IOPS"),
    ("64 hosts x 1 queue: min/max IOPS per host", "hosts64x1.minmax", None, ">= 0.5", ""),
    ("16 hosts x 4 queues, 4 KiB QD32 / 4-queue figure", "hosts16x4", "nvme.4k.q4", ">= 0.9", "IOPS"),
    ("16 hosts x 4 queues: min/max IOPS per host", "hosts16x4.minmax", None, ">= 0.5", ""),
    ("NVMe-oF/RDMA 4 KiB QD1 p50 latency / raw d1 ping-pong p50, both ends on one CPU (lower is better)", "nvme.qd1.same", "raw.pp.d1.same.p50", "", "us"),
    ("NVMe-oF/RDMA 4 KiB QD1 p99 latency / raw d1 ping-pong p99, both ends on one CPU (lower is better)", "nvme.qd1.same.p99", "raw.pp.d1.same.p99", "", "us"),
    ("NVMe-oF/RDMA 4 KiB QD1 p50 latency / raw d1 ping-pong p50, ends on two CPUs (lower is better)", "nvme.qd1.cross", "raw.pp.d1.cross.p50", "", "us"),
    ("NVMe-oF/RDMA 4 KiB QD1 p99 latency / raw d1 ping-pong p99, ends on two CPUs (lower is better)", "nvme.qd1.cross.p99", "raw.pp.d1.cross.p99", "", "us"),
    ("loop device (direct I/O) 4 KiB randread QD32: through the target / local fio io_uring", "file.rdisk.4k", "file.local.4k", ">= 0.8", "IOPS"),
    ("loop device (direct I/O) 128 KiB read QD8: through the target / local fio io_uring", "file.rdisk.128k", "file.local.128k", ">= 0.9", "B/s"),
]
out = {"reps": reps, "seconds_per_run": int(dur), "rows": [], "raw": {}}
def fmt(v, unit):
    if unit == "B/s":
        return f"{v/1e9:.2f} GB/s"
    if unit == "IOPS":
        return f"{v/1e3:.1f}k"
    if unit == "us":
        return f"{v:.0f} us"
    return f"{v:.2f}"
lines = []
for fig, num, den, goal, unit in rows:
    ratios, nums, dens = [], [], []
    for r, v in sorted(vals.items()):
        if r == 0 or num not in v:
            continue
        nums.append(v[num])
        if den is None:
            ratios.append(v[num])
        elif v.get(den):
            dens.append(v[den])
            ratios.append(v[num] / v[den])
    if not ratios:
        out["rows"].append({"figure": fig, "skipped": True})
        lines.append((fig, "skipped", "", "", goal))
        continue
    med = statistics.median(ratios)
    row = {"figure": fig, "ratio": round(med, 3), "ratio_min": round(min(ratios), 3), "ratio_max": round(max(ratios), 3),
           "ratios": [round(x, 3) for x in ratios], "value": statistics.median(nums), "goal": goal}
    if dens:
        row["baseline"] = statistics.median(dens)
    out["rows"].append(row)
    lines.append((fig, f"{med:.2f}", f"{min(ratios):.2f}-{max(ratios):.2f}",
                  fmt(row["value"], unit) + (" / " + fmt(row["baseline"], unit) if dens else ""), goal))
mem = vals.get(0, {})
if "mem.idle.per.conn.kib" in mem:
    out["memory"] = {k: mem[k] for k in mem}
for r, v in sorted(vals.items()):
    if r:
        out["raw"][str(r)] = v
if as_json:
    json.dump(out, sys.stdout, indent=2)
    print()
    sys.exit()
print(f"rdisk speed table: {reps} repetition(s), {dur} s per measurement, loopback, software iWARP; median ratio (min-max)")
w = max(len(l[0]) for l in lines)
print(f"{'figure'.ljust(w)}  ratio  range      value / baseline (medians)    goal")
for fig, ratio, rng, vb, goal in lines:
    print(f"{fig.ljust(w)}  {ratio:>5}  {rng:<9}  {vb:<28}  {goal}")
if "memory" in out:
    m = out["memory"]
    print(f"memory per idle NVMe-oF/RDMA connection (64 idle hosts, 1 queue of 32 each): {m['mem.idle.per.conn.kib']:.0f} KiB "
          f"(target RSS {m['mem.before.kib']/1024:.1f} MiB before, {m['mem.idle64.kib']/1024:.1f} MiB with 64 idle, {m['mem.after.run.kib']/1024:.1f} MiB after a 1 s run; goal <= 256 KiB)")
PY
