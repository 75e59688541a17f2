#!/usr/bin/env bash
# Runs the fio jobs of deploy/fio against rdisk's NBD export and prints one
# table (IOPS, MB/s, p50/p99 completion latency per job).
#
#   scripts/bench-fio.sh                      rdisk target (RAM disk) + rdisk connect --nbd, all jobs
#   scripts/bench-fio.sh --url nvme://H/NQN   the same jobs against that remote disk instead
#   scripts/bench-fio.sh --nbdkit             also against nbdkit's memory plugin (plain NBD over a socket)
#   scripts/bench-fio.sh --runtime 5 --size 512M --jobs "randread-4k seqread-128k"
#
# Needs fio with the nbd engine (Debian: apt-get install fio), go, python3,
# and nbdkit for --nbdkit. Uses only loopback addresses.
set -euo pipefail
cd "$(dirname "$0")/.."

url="" runtime=10 size=1G nbdkit=0 port=14420
jobs="randread-4k randwrite-4k randrw-70-30-4k seqread-128k seqwrite-128k verify-crc32c"
while (($#)); do
	case "$1" in
	--url) url="$2"; shift 2 ;;
	--runtime) runtime="$2"; shift 2 ;;
	--size) size="$2"; shift 2 ;;
	--jobs) jobs="$2"; shift 2 ;;
	--nbdkit) nbdkit=1; shift ;;
	--port) port="$2"; shift 2 ;;
	-h|--help) sed -n '2,12p' "$0"; exit 0 ;;
	*) echo "bench-fio.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
	esac
done
for tool in fio python3 go; do
	command -v "$tool" >/dev/null || { echo "bench-fio.sh: $tool is not installed" >&2; exit 1; }
done
fio --enghelp 2>/dev/null | grep -qx '[[:space:]]*nbd' || { echo "bench-fio.sh: this fio has no nbd engine" >&2; exit 1; }
if ((nbdkit)) && ! command -v nbdkit >/dev/null; then
	echo "bench-fio.sh: nbdkit is not installed (apt-get install nbdkit)" >&2; exit 1
fi

tmp=$(mktemp -d /tmp/rdisk-bench.XXXXXX)
pids=()
cleanup() {
	[ -x "$tmp/rdisk" ] && "$tmp/rdisk" disconnect --all --control "$tmp/ctl.sock" >/dev/null 2>&1 || true
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT

go build -o "$tmp/rdisk" ./cmd/rdisk

if [ -z "$url" ]; then
	# A RAM disk large enough for SIZE.
	"$tmp/rdisk" target --listen "127.0.0.1:$port" --size "$size" >"$tmp/target.log" 2>&1 &
	pids+=($!)
	url="nvme://127.0.0.1:$port/nqn.2026-11.io.rdisk:default"
	for _ in $(seq 50); do grep -q "serving" "$tmp/target.log" && break; sleep 0.1; done
	grep -q "serving" "$tmp/target.log" || { cat "$tmp/target.log" >&2; exit 1; }
fi
"$tmp/rdisk" connect "$url" --name bench --control "$tmp/ctl.sock" --nbd "unix:$tmp/bench.nbd" >"$tmp/connect.log"
targets=("rdisk $url|nbd+unix:///bench?socket=$tmp/bench.nbd")

if ((nbdkit)); then
	nbdkit --foreground --unix "$tmp/nbdkit.sock" memory "size=$size" &
	pids+=($!)
	for _ in $(seq 50); do [ -S "$tmp/nbdkit.sock" ] && break; sleep 0.1; done
	targets+=("nbdkit memory (plain NBD)|nbd+unix:///?socket=$tmp/nbdkit.sock")
fi

for t in "${targets[@]}"; do
	name=${t%%|*} uri=${t#*|}
	for job in $jobs; do
		out="$tmp/$(echo "$name" | tr -c 'a-zA-Z0-9' _)-$job.json"
		echo "== $name: $job" >&2
		if ! NBD_URI="$uri" SIZE="$size" RUNTIME="$runtime" fio --output-format=json --output="$out" "deploy/fio/$job.fio" >&2; then
			echo "bench-fio.sh: fio $job failed against $name" >&2
			echo "{\"failed\": true, \"target\": \"$name\", \"job\": \"$job\"}" >"$out"
		fi
		python3 - "$name" "$job" "$out" >>"$tmp/rows" <<'PY'
import json, sys
name, job, path = sys.argv[1:]
try:
    d = json.load(open(path))
except Exception:
    d = {"failed": True}
if d.get("failed"):
    print(f"{name}\t{job}\tFAILED\t\t\t\t")
    sys.exit()
j = d["jobs"][0]
iops = bw = 0.0
p50 = p99 = 0.0
n = 0
# The verify job's read-back is not a timed phase: report its writes.
for k in (("write",) if job.startswith("verify") else ("read", "write")):
    s = j[k]
    if s["total_ios"] == 0:
        continue
    iops += s["iops"]
    bw += s["bw_bytes"]
    pct = s["clat_ns"].get("percentile", {})
    p50 = max(p50, pct.get("50.000000", 0) / 1000)
    p99 = max(p99, pct.get("99.000000", 0) / 1000)
err = j.get("error", 0)
print(f"{name}\t{job}\t{iops:.0f}\t{bw/1e6:.1f}\t{p50:.0f}\t{p99:.0f}\t{'ok' if err == 0 else 'error ' + str(err)}")
PY
	done
done

echo
python3 - "$tmp/rows" "$runtime" "$size" <<'PY'
import sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
hdr = ["target", "job", "IOPS", "MB/s", "p50 us", "p99 us", "result"]
w = [max(len(str(r[i])) for r in rows + [hdr]) for i in range(len(hdr))]
print(f"fio {sys.argv[2]}s per timed job over {sys.argv[3]} (verify-crc32c: one pass, its writes shown); latency = completion latency (clat)")
print("  ".join(h.ljust(w[i]) if i < 2 else h.rjust(w[i]) for i, h in enumerate(hdr)))
for r in rows:
    print("  ".join(str(c).ljust(w[i]) if i < 2 or i == 6 else str(c).rjust(w[i]) for i, c in enumerate(r)))
PY
