#!/usr/bin/env bash
# The project's test command (README): installs what the tests need, then
# checks formatting, vets, runs the race detector on the core packages and
# the whole suite. Safe to run repeatedly.
set -euo pipefail
cd "$(dirname "$0")/.."

# Tools the tests drive (they skip with a message when one is missing):
# losetup/mkfs.ext4 (backstore, FUSE), fio with its nbd engine and qemu-io
# (NBD), fusermount3 (FUSE), iscsi-test-cu (libiscsi conformance).
need_apt=()
command -v losetup >/dev/null 2>&1 || need_apt+=(util-linux)
command -v mkfs.ext4 >/dev/null 2>&1 || need_apt+=(e2fsprogs)
command -v fio >/dev/null 2>&1 || need_apt+=(fio)
command -v qemu-io >/dev/null 2>&1 || need_apt+=(qemu-utils)
command -v fusermount3 >/dev/null 2>&1 || need_apt+=(fuse3)
command -v iscsi-test-cu >/dev/null 2>&1 || need_apt+=(libiscsi-bin)
command -v systemd-analyze >/dev/null 2>&1 || need_apt+=(systemd) # deploy/: systemd-analyze verify of the units
# The verbs build (-tags verbs, cgo): rdma-core's headers and libraries.
[ -e /usr/include/infiniband/verbs.h ] && [ -e /usr/include/rdma/rdma_cma.h ] || need_apt+=(libibverbs-dev librdmacm-dev)
if ((${#need_apt[@]})); then
	if [ "$(id -u)" = 0 ]; then
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
	else
		echo "test.sh: missing ${need_apt[*]} (not root: tests that need them will skip)" >&2
	fi
fi

# The Ceph RBD backstore (backstore/rbd, -tags ceph,pacific, cgo): librbd and
# librados headers, and ceph-mon/ceph-osd for its tests' throwaway cluster
# (test/ceph/ceph-lab.sh). About 12 s; if it fails the rbd tests skip.
ceph_pkgs=(ceph-mon ceph-osd ceph-common librbd-dev librados-dev)
if ! { [ -e /usr/include/rbd/librbd.h ] && [ -e /usr/include/rados/librados.h ] &&
	command -v ceph-mon && command -v ceph-osd && command -v rbd; } >/dev/null 2>&1; then
	if [ "$(id -u)" = 0 ]; then
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${ceph_pkgs[@]}"; } >/dev/null 2>&1 ||
			echo "test.sh: installing ${ceph_pkgs[*]} failed: the rbd tests will skip" >&2
	else
		echo "test.sh: missing ${ceph_pkgs[*]} (not root: the rbd tests will skip)" >&2
	fi
fi

go mod download

echo "== gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
	echo "gofmt needed on:"; echo "$unformatted"; exit 1
fi

echo "== go vet"
go vet ./...

# The verbs variant builds and vets here even without an RDMA device (the
# lab runs it: test/interop/run-verbs-conformance.sh).
if [ -e /usr/include/infiniband/verbs.h ] && [ -e /usr/include/rdma/rdma_cma.h ]; then
	echo "== go vet / build / test -tags verbs"
	go vet -tags verbs ./rdma/verbs ./cmd/rdisk
	go build -tags verbs -o /dev/null ./cmd/rdisk
	go test -tags verbs -count=1 ./rdma/verbs
else
	echo "== -tags verbs skipped: libibverbs-dev/librdmacm-dev missing (not root?)"
fi

# The Ceph RBD backstore against a throwaway cluster it starts (about 15 s,
# 30 s with -race; the tests skip without ceph-mon/ceph-osd), and two
# gateways over one image with rdisk bench --verify through both (10 s).
if [ -e /usr/include/rbd/librbd.h ] && [ -e /usr/include/rados/librados.h ]; then
	echo "== go vet / build / test -tags ceph,pacific (backstore/rbd, gateways over RBD)"
	go vet -tags ceph,pacific ./backstore/rbd/ ./cmd/rdisk/
	go build -tags ceph,pacific -o /dev/null ./cmd/rdisk
	# In two of nine CI runs rbd create hung 60 s: the shared test cluster's
	# OSD reported itself full (OSD_FULL). Reproduced here (2 in ~60 runs):
	# memstore's byte count (Ceph 16) went 30-60 KB below zero and the
	# OSD, computing used = total - available in uint64, saw itself 2^64
	# bytes full. ceph-lab.sh now writes a 64 MiB ballast object so the
	# count stays positive. Should OSD_FULL still end a run, the package
	# runs once more, with the first run's output kept above.
	rbdtest() {
		local out
		if out=$(go test "$@" 2>&1); then
			echo "$out"
			return 0
		fi
		echo "$out"
		if grep -q OSD_FULL <<<"$out" && ! grep -q -- "--- FAIL: TestFullAndTimeout" <<<"$out"; then
			echo "test.sh: FLAKE: the shared test cluster's OSD went full (see the OSD store line above); running the package once more"
			go test "$@"
			return
		fi
		return 1
	}
	rbdtest -tags ceph,pacific -count=1 -timeout 10m ./backstore/rbd/
	rbdtest -race -tags ceph,pacific -count=1 -timeout 10m ./backstore/rbd/
	go test -tags ceph,pacific -count=1 -timeout 10m -run 'TestCeph' ./cmd/rdisk/
else
	echo "== -tags ceph,pacific skipped: librbd-dev/librados-dev missing (not root?)"
fi

# Core packages: wire codecs, transport, storage.
core=(./rdma/... ./internal/...)
for d in backstore nvmeof scsi iser srp; do
	[ -d "$d" ] && core+=("./$d/...")
done
echo "== go test -race (core)"
go test -race -count=1 -timeout 20m "${core[@]}"

echo "== go test (all)"
go test -count=1 -timeout 30m ./...
