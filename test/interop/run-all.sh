#!/usr/bin/env bash
# Runs every interop lab harness in turn (each boots the RDMA lab guest under
# QEMU) and prints each one's summary PASS/FAIL lines, its time, and a table
# at the end. Exit status 0 only if every run passed; without the lab it
# prints SKIP and exits 0, like the harnesses.
#
# Usage: test/interop/run-all.sh [name-substring...]   (only the matching runs)
#   LAB=DIR            the lab (default: ../shared/lab next to the project root)
#   RUNALL_DIR=DIR     where the console logs and outputs go
#                      (default: a new $TMPDIR/rdisk-interop.XXXXXX)
#   SRP_INDIRECT_MODPARAMS=...  ib_srp parameters of the srp-linux-indirect run
#   SRP_EXTERNAL_MODPARAMS=...  and of the srp-linux-external run (defaults below)
#
# Runs (name: harness and environment):
#   rping                 run-rping.sh
#   nvme-linux-host       run-nvme-linux-host.sh (RAM disk)
#   nvme-linux-host-loop  run-nvme-linux-host.sh, NVME_BACKING=loop
#   nvme-linux-host-tcp   run-nvme-linux-host.sh, NVME_TRANSPORT=tcp (Linux nvme-tcp)
#   nvme-linux-host-tcp-digest  the same with header and data digests
#   nvme-host             run-nvme-host.sh (rdisk host against nvmet-rdma)
#   nvme-host-tcp         the same against nvmet-tcp (NVME_HOST_TRANSPORT=tcp)
#   nvme-host-tcp-digest  the same with header and data digests
#   iser-linux            run-iser-linux.sh (ib_iser and iscsi_tcp)
#   srp-linux             run-srp-linux-initiator.sh (ib_srp defaults: fast
#                         registration, direct descriptors)
#   srp-linux-indirect    run-srp-linux-initiator.sh, SRP_MODPARAMS=never_register=1:
#                         no memory registration, so a request with more than
#                         one S/G entry goes out as an indirect descriptor table
#   srp-linux-external    the same with cmd_sg_entries=2 allow_ext_sg=1
#                         indirect_sg_entries=64: tables of more than 2 entries
#                         stay outside the IU and the target fetches them
# (the guest script checks the target's descriptor counters in these two)
#   nvme-multipath        run-nvme-multipath.sh (Linux native NVMe multipath over
#                         two rdisk gateways with ANA groups; nvme-tcp)
#   verbs-conformance     run-verbs-conformance.sh (the rdma conformance suite on
#                         the cgo verbs provider, over rxe and siw)
#   verbs-cross           run-verbs-cross.sh (rdisk target on verbs/siw <- rdisk
#                         host tools on the pure-Go iWARP provider, and the reverse)
#   verbs-rxe             run-verbs-rxe.sh (rdisk on verbs/rxe against the kernel's
#                         nvme-rdma, nvmet-rdma, ib_srp, ib_srpt, ib_iser, isert)
#   verbs-badinput-rxe    run-verbs-badinput-rxe.sh (malformed CM private data and
#                         junk messages to rdisk's target on verbs/rxe)
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
LAB=${LAB:-../shared/lab}
[[ $LAB = /* ]] || LAB=$ROOT/$LAB
if [[ ! -x $LAB/run-guest.sh ]]; then
  echo "SKIP: interop: RDMA lab not found at $LAB (set LAB=/path/to/lab); nothing run"
  exit 0
fi
if ! command -v qemu-system-x86_64 >/dev/null; then
  echo "SKIP: interop: qemu-system-x86_64 is not installed (apt-get install qemu-system-x86); nothing run"
  exit 0
fi
export LAB
dir=${RUNALL_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/rdisk-interop.XXXXXX")}
mkdir -p "$dir" || exit 1
indirect=${SRP_INDIRECT_MODPARAMS:-never_register=1}
external=${SRP_EXTERNAL_MODPARAMS:-never_register=1 cmd_sg_entries=2 allow_ext_sg=1 indirect_sg_entries=64}

selected() { # NAME: true without filters, or if a filter is a substring of NAME
  [[ ${#filters[@]} = 0 ]] && return 0
  local f
  for f in "${filters[@]}"; do [[ $1 == *"$f"* ]] && return 0; done
  return 1
}

names=() results=() secs=()
fails=0
# run NAME HARNESS [VAR=VALUE...]: one harness, its console log in $dir/NAME.log
# (each harness takes the log file from a variable of its own), its output in
# $dir/NAME.out.
run() {
  local name=$1 script=$2 rc t0 t res
  shift 2
  selected "$name" || return 0
  echo
  echo "=== $name: ${*:+$* }$script"
  t0=$SECONDS
  # The runs' own settings only: unset what selects a variant.
  env -u NVME_BACKING -u NVME_TRANSPORT -u NVME_DIGEST -u NVME_HOST_TRANSPORT -u NVME_HOST_DIGEST -u SRP_MODPARAMS -u SRP_EXTRA \
    -u VERBS_ONLY -u VERBS_RUN -u VERBS_COUNT -u CROSS_ONLY -u CROSS_PROTO -u RXE_CELLS -u RXE_MB \
    RPING_LOG="$dir/$name.log" NVME_LOG="$dir/$name.log" NVME_HOST_LOG="$dir/$name.log" \
    ISER_LOG="$dir/$name.log" SRP_LOG="$dir/$name.log" MPATH_LOG="$dir/$name.log" \
    VERBS_LOG="$dir/$name.log" CROSS_LOG="$dir/$name.log" RXE_LOG="$dir/$name.log" BADIN_LOG="$dir/$name.log" "$@" \
    "$ROOT/test/interop/$script" >"$dir/$name.out" 2>&1
  rc=$?
  t=$((SECONDS - t0))
  # The summary: the harness's overall line (an upper-case name, a colon),
  # rping's per-direction lines, every failed step, the lab's timing, SKIP;
  # each once (a failed harness prints the log's last lines again).
  grep -E '^([A-Z0-9-]+: (PASS|FAIL)|[A-Za-z0-9-]+ \([^)]*\): (PASS|FAIL)|[^ ]+: FAIL|LAB-TIMING|SKIP)' "$dir/$name.out" | awk '!seen[$0]++'
  if [[ $rc = 0 ]] && grep -q '^SKIP' "$dir/$name.out"; then
    res=SKIP
  elif [[ $rc = 0 ]]; then
    res=PASS
  else
    res="FAIL (rc=$rc)"
    fails=$((fails + 1))
    echo "-- $name failed: harness output $dir/$name.out, console log $dir/$name.log"
  fi
  echo "=== $name: $res in ${t}s"
  names+=("$name") results+=("$res") secs+=("$t")
}

filters=("$@")
echo "== interop: logs in $dir"
t_all=$SECONDS
run rping run-rping.sh
run nvme-linux-host run-nvme-linux-host.sh
run nvme-linux-host-loop run-nvme-linux-host.sh NVME_BACKING=loop
run nvme-linux-host-tcp run-nvme-linux-host.sh NVME_TRANSPORT=tcp
run nvme-linux-host-tcp-digest run-nvme-linux-host.sh NVME_TRANSPORT=tcp NVME_DIGEST=1
run nvme-host run-nvme-host.sh
run nvme-host-tcp run-nvme-host.sh NVME_HOST_TRANSPORT=tcp
run nvme-host-tcp-digest run-nvme-host.sh NVME_HOST_TRANSPORT=tcp NVME_HOST_DIGEST=1
run iser-linux run-iser-linux.sh
run srp-linux run-srp-linux-initiator.sh
run srp-linux-indirect run-srp-linux-initiator.sh "SRP_MODPARAMS=$indirect"
run srp-linux-external run-srp-linux-initiator.sh "SRP_MODPARAMS=$external"
run nvme-multipath run-nvme-multipath.sh
run verbs-conformance run-verbs-conformance.sh
run verbs-cross run-verbs-cross.sh
run verbs-rxe run-verbs-rxe.sh
run verbs-badinput-rxe run-verbs-badinput-rxe.sh
total=$((SECONDS - t_all))
echo
echo "=== interop summary ==="
for i in "${!names[@]}"; do
  printf '%-22s %-14s %4ss\n' "${names[$i]}" "${results[$i]}" "${secs[$i]}"
done
echo "total: ${#names[@]} runs in ${total}s, $fails failed (logs in $dir)"
if [[ ${#names[@]} = 0 ]]; then
  echo "INTEROP: FAIL (no run matches: $*)"
  exit 2
fi
if [[ $fails = 0 ]]; then echo "INTEROP: PASS"; exit 0; fi
echo "INTEROP: FAIL ($fails of ${#names[@]})"
exit 1
