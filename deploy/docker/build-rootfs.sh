#!/bin/sh
# build-rootfs.sh [ROOT]: what deploy/docker/Dockerfile does, without a
# container engine, then a smoke test of the result.
#
#  1. the build stage: a static rdisk (CGO_ENABLED=0 -trimpath) at $ROOT/rdisk;
#  2. the image: deploy/config/all.json as $ROOT/etc/rdisk/target.json and
#     the volume directory $ROOT/var/lib/rdisk;
#  3. the smoke test: $ROOT/rdisk target on a copy of target.json moved to
#     127.0.0.1 with ports 0 (the kernel picks free ones) and sparse backing
#     files in $ROOT/smoke (removed afterwards), probed over the admin socket (rdisk admin status), NVMe/TCP
#     discovery and iSCSI SendTargets, then stopped with SIGTERM.
#
# ROOT defaults to a temporary directory, removed at the end; one given is
# kept (tar -C ROOT -c . | docker import - rdisk makes an image of it). Exits
# non-zero when a step fails, printing the target's output.
set -eu

repo=$(cd "$(dirname "$0")/../.." && pwd)
if [ $# -gt 0 ]; then
	ROOT=$1
	keep=1
	mkdir -p "$ROOT"
else
	ROOT=$(mktemp -d "${TMPDIR:-/tmp}/rdisk-rootfs.XXXXXX")
	keep=0
fi
ROOT=$(cd "$ROOT" && pwd)
pid=
cleanup() {
	if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
		kill -KILL "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	fi
	rm -rf "$ROOT/smoke"
	if [ "$keep" = 0 ]; then
		rm -rf "$ROOT"
	fi
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

fail() {
	echo "build-rootfs: FAIL: $*" >&2
	if [ -f "$ROOT/smoke/target.log" ]; then
		echo "--- rdisk target output ---" >&2
		cat "$ROOT/smoke/target.log" >&2
	fi
	exit 1
}

# 1. Build, as the Dockerfile's build stage (-buildvcs=false: the image's
# build context has no .git either).
echo "build-rootfs: building $ROOT/rdisk"
(cd "$repo" && CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags='-s -w' -o "$ROOT/rdisk" ./cmd/rdisk) ||
	fail "go build"

# 2. The image's files.
mkdir -p "$ROOT/etc/rdisk" "$ROOT/var/lib/rdisk" "$ROOT/run/rdisk" "$ROOT/tmp"
cp "$repo/deploy/config/all.json" "$ROOT/etc/rdisk/target.json"
chmod 0644 "$ROOT/etc/rdisk/target.json"
"$ROOT/rdisk" --version >/dev/null 2>&1 || "$ROOT/rdisk" --help >/dev/null || fail "$ROOT/rdisk does not run"

# 3. Smoke test on loopback: every address to 127.0.0.1 port 0, the backing
# files in $smoke, so that $ROOT/var/lib/rdisk stays as empty as the image's.
smoke=$ROOT/smoke
mkdir -p "$smoke"
sed -e 's#"traddr": "[^"]*"#"traddr": "127.0.0.1"#g' \
	-e 's#"trsvcid": "[0-9]*"#"trsvcid": "0"#g' \
	-e 's#"[0-9.]*:[0-9][0-9]*"#"127.0.0.1:0"#g' \
	-e "s#\"/var/lib/rdisk/#\"$smoke/#g" \
	"$ROOT/etc/rdisk/target.json" >"$smoke/target.json"
for img in $(grep -o "\"$smoke/[^\"]*\.img\"" "$smoke/target.json" | tr -d '"'); do
	[ -e "$img" ] || truncate -s 64M "$img" || fail "creating $img"
done

sock=$smoke/admin.sock
"$ROOT/rdisk" target --config "$smoke/target.json" --admin-socket "$sock" >"$smoke/target.log" 2>&1 &
pid=$!
i=0
while ! grep -q '^  admin: ' "$smoke/target.log" 2>/dev/null; do
	kill -0 "$pid" 2>/dev/null || fail "rdisk target exited at start"
	i=$((i + 1))
	[ "$i" -le 150 ] || fail "rdisk target did not serve its admin socket in 15 s"
	sleep 0.1
done

hostnqn=nqn.2014-08.org.nvmexpress:uuid:0c8b7a4e-1f2d-4e3a-9b5c-000000000001
hostid=0c8b7a4e-1f2d-4e3a-9b5c-000000000001
initiator=iqn.1994-05.com.redhat:client1
# XDG_CONFIG_HOME: rdisk keeps a generated host identity there; keep it in
# the rootfs rather than the caller's home.
export XDG_CONFIG_HOME="$smoke/config"

"$ROOT/rdisk" admin --socket "$sock" status >"$smoke/status.txt" 2>&1 || { cat "$smoke/status.txt" >&2; fail "rdisk admin status"; }
for want in nqn.2026-11.io.rdisk:nvme0 nqn.2026-11.io.rdisk:iscsi0 nqn.2026-11.io.rdisk:srp0 iqn.2026-11.io.rdisk:iscsi0; do
	grep -q "$want" "$smoke/status.txt" || { cat "$smoke/status.txt" >&2; fail "rdisk admin status does not show $want"; }
done
echo "build-rootfs: admin status ok"

nvme=$(sed -n 's#.*rdisk discover \(nvme+tcp://[^ ]*\).*#\1#p' "$smoke/target.log" | head -n 1)
[ -n "$nvme" ] || fail "no NVMe/TCP port in the target's output"
"$ROOT/rdisk" discover --hostnqn "$hostnqn" --hostid "$hostid" --timeout 10s "$nvme" >"$smoke/discover.txt" 2>&1 ||
	{ cat "$smoke/discover.txt" >&2; fail "rdisk discover $nvme"; }
grep -q nqn.2026-11.io.rdisk:nvme0 "$smoke/discover.txt" || { cat "$smoke/discover.txt" >&2; fail "$nvme does not list nqn.2026-11.io.rdisk:nvme0"; }
echo "build-rootfs: NVMe/TCP discovery at $nvme ok"

iscsi=$(sed -n 's#.*rdisk discover \(iscsi://[^ ]*\).*#\1#p' "$smoke/target.log" | head -n 1)
[ -n "$iscsi" ] || fail "no iSCSI portal in the target's output"
"$ROOT/rdisk" discover --initiator-name "$initiator" --timeout 10s "$iscsi" >"$smoke/sendtargets.txt" 2>&1 ||
	{ cat "$smoke/sendtargets.txt" >&2; fail "rdisk discover $iscsi"; }
grep -q iqn.2026-11.io.rdisk:iscsi0 "$smoke/sendtargets.txt" || { cat "$smoke/sendtargets.txt" >&2; fail "$iscsi does not list iqn.2026-11.io.rdisk:iscsi0"; }
echo "build-rootfs: iSCSI SendTargets at $iscsi ok"

kill -TERM "$pid"
status=0
wait "$pid" || status=$?
pid=
[ "$status" = 0 ] || fail "rdisk target exited with status $status on SIGTERM"
echo "build-rootfs: ok: $ROOT"
