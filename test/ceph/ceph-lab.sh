#!/usr/bin/env bash
# ceph-lab.sh start|stop DIR: a throwaway single-node Ceph cluster for tests
# (1 mon + 1 memstore OSD, no mgr, no cephx, 127.0.0.1 only), up in 1-2 s.
# See README.md in this directory for the environment variables.
#   start DIR  creates DIR (emptied first), starts the daemons, creates pool
#              "rbd" and image rbd/test, writes the conf to DIR/ceph.conf and
#              prints "export CEPH_CONF=DIR/ceph.conf".
#   stop DIR   kills the daemons (SIGKILL, by the PIDs in DIR/pids) and
#              removes DIR ("stop DIR keep" keeps it, with its logs).
set -euo pipefail
CMD=${1:-} DIR=${2:-}
[ -n "$CMD" ] && [ -n "$DIR" ] || { echo "usage: $0 start|stop DIR" >&2; exit 2; }
case $DIR in /*) ;; *) DIR=$PWD/$DIR ;; esac

if [ "$CMD" = stop ]; then
	if [ -f "$DIR/pids" ]; then
		# (The watcher runs this stop itself, under its own PID: skip it.)
		while read -r _ pid; do [ "$pid" = $$ ] || kill -9 "$pid" 2>/dev/null || true; done <"$DIR/pids"
	fi
	rm -f "$DIR/pids"
	[ "${3:-}" = keep ] || rm -rf "$DIR"
	exit 0
fi
[ "$CMD" = start ] || { echo "usage: $0 start|stop DIR" >&2; exit 2; }
for b in ceph ceph-mon ceph-osd ceph-authtool monmaptool rbd; do
	command -v "$b" >/dev/null 2>&1 || { echo "ceph-lab: $b not installed (apt-get install ceph-mon ceph-osd ceph-common)" >&2; exit 3; }
done

busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
PORT=${CEPH_LAB_MON_PORT:-}
if [ -z "$PORT" ]; then
	# A free port outside the OSDs' 6800-7300 and the usual ephemeral range.
	for _ in $(seq 50); do
		PORT=$((20000 + RANDOM % 12000))
		busy "$PORT" || break
	done
fi
busy "$PORT" && { echo "ceph-lab: mon port $PORT busy" >&2; exit 1; }

SELF=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
trap 'echo "ceph-lab: failed at line $LINENO, logs: $DIR/log" >&2; "$SELF" stop "$DIR" keep' ERR
rm -rf "$DIR"
mkdir -p "$DIR"/{mon,osd,run,log}
FSID=$(cat /proc/sys/kernel/random/uuid)
export CEPH_CONF=$DIR/ceph.conf
cat >"$CEPH_CONF" <<CONF
[global]
fsid = $FSID
mon host = 127.0.0.1:$PORT
public addr = 127.0.0.1
auth cluster required = none
auth service required = none
auth client required = none
mon allow pool size one = true
mon warn on pool no redundancy = false
mon data avail warn = 2
mon data avail crit = 1
mon warn on insecure global id reclaim = false
mon warn on insecure global id reclaim allowed = false
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0
paxos propose interval = 0.05
osd heartbeat interval = 1
run dir = $DIR/run
admin socket = $DIR/run/\$name.\$pid.asok
log file = $DIR/log/\$name.log
[mon]
mon data = $DIR/mon/\$id
[osd]
osd data = $DIR/osd/\$id
osd objectstore = memstore
memstore device bytes = ${CEPH_LAB_OSD_BYTES:-4294967296}
memstore page set = true
memstore page size = 4096
osd crush update on start = false
osd class update on start = false
[client]
rbd cache = false
rbd skip partial discard = false
CONF
c() { timeout 30 ceph --connect-timeout 20 "$@"; }
ceph-authtool --create-keyring "$DIR/mon.keyring" --gen-key -n mon. --cap mon 'allow *' >/dev/null
monmaptool --create --fsid "$FSID" --add a "127.0.0.1:$PORT" "$DIR/monmap" >/dev/null
ceph-mon --mkfs -i a --monmap "$DIR/monmap" --keyring "$DIR/mon.keyring"
ceph-mon -i a -f >>"$DIR/log/mon.out" 2>&1 &
echo "mon $!" >>"$DIR/pids"
# A mon that lost a race for the port retries its bind: make sure ours answers.
[ "$(c fsid)" = "$FSID" ]
U=$(cat /proc/sys/kernel/random/uuid)
ID=$(c osd new "$U")
c osd crush add "osd.$ID" 1.0 root=default 2>/dev/null
mkdir -p "$DIR/osd/$ID"
ceph-osd -i "$ID" --mkfs --osd-uuid "$U" >>"$DIR/log/osd.out" 2>&1
ceph-osd -i "$ID" -f >>"$DIR/log/osd.out" 2>&1 &
echo "osd $!" >>"$DIR/pids"
up=
for _ in $(seq 150); do
	if grep -q "^osd.$ID up" <<<"$(c osd dump)"; then up=1; break; fi
	sleep 0.2
done
[ -n "$up" ]
c osd pool create rbd 8 8 >/dev/null 2>&1
timeout 60 rbd pool init rbd
# Ballast: memstore's count of the bytes it holds (Ceph 16) now and then
# drops below zero, by 30-60 KB in the two cases seen in ~60 runs of the
# rbd tests here. The OSD computes used = total - available in uint64,
# finds itself some 2^64 bytes full and stops every write (OSD_FULL,
# "failsafe engaged, now -2147483648% full"), so a test's `rbd create`
# hangs. 64 MiB that nothing reads or removes keep the count positive.
head -c "${CEPH_LAB_BALLAST_BYTES:-67108864}" /dev/zero | timeout 60 rados -p rbd put rdisk-lab-ballast -
# layering only by default: no exclusive-lock, so several clients (rdisk's
# lock mode "shared") can write at once.
timeout 60 rbd create --size "${CEPH_LAB_IMAGE_SIZE:-256M}" --image-feature "${CEPH_LAB_IMAGE_FEATURES:-layering}" rbd/test
timeout 30 rbd ls rbd >/dev/null
echo "$PORT" >"$DIR/mon-port"
if [ -n "${CEPH_LAB_WATCH_PID:-}" ]; then
	# Stop the cluster when that process ends (a test binary that panicked
	# or was killed never runs its cleanup).
	setsid bash -c 'while kill -0 "$1" 2>/dev/null; do sleep 1; done; exec "$2" stop "$3"' _ \
		"$CEPH_LAB_WATCH_PID" "$SELF" "$DIR" </dev/null >/dev/null 2>&1 &
	echo "watch $!" >>"$DIR/pids"
fi
echo "export CEPH_CONF=$CEPH_CONF"
