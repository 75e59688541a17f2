package target

import (
	"testing"

	"github.com/rdisk/rdisk/nvmeof"
)

// nsStats returns namespace nsid's counters.
func nsStatsOf(t testing.TB, sub *Subsystem, nsid uint32) NamespaceStats {
	t.Helper()
	for _, st := range sub.NamespaceStats() {
		if st.NSID == nsid {
			return st
		}
	}
	t.Fatalf("no stats for namespace %d", nsid)
	return NamespaceStats{}
}

func TestNamespaceStats(t *testing.T) {
	t.Parallel()
	_, sub, addr := testTarget(t, 1<<20)
	aq, cntlid := admin(t, addr, testNQN, hostNQN, 0)
	sqe := make(nvmeof.SQE, 64)
	sqe.Features().Encode(&nvmeof.FeaturesFields{Opcode: nvmeof.AdminSetFeatures, FID: nvmeof.FeatNumQueues, CDW11: nvmeof.NumQueuesValue(0, 0)})
	must(t, aq.exec(sqe, 0, nil), "set number of queues")
	io := ioQueue(t, addr, 1, cntlid, 16)
	for i := range 4 {
		must(t, rw(io, i%2 == 0, uint64(i)*8, 8, false), "read or write")
	}
	// Past the end: LBA Out of Range (generic status).
	wantStatus(t, rw(io, false, 1<<20/512, 1, false), nvmeof.StatusLBAOutOfRange.WithDNR(), "read past the end")
	// A miscompare: Compare Failure (media error).
	clear(io.data()[:512])
	io.data()[0] = 1
	sqe = make(nvmeof.SQE, 64)
	sqe.RW().Encode(&nvmeof.RWFields{Opcode: nvmeof.IOCompare, NSID: 1, SLBA: 100})
	wantStatus(t, io.exec(sqe, 512, nil), nvmeof.StatusCompareFailure.WithDNR(), "compare")
	// A namespace that does not exist counts nowhere.
	sqe = make(nvmeof.SQE, 64)
	sqe.RW().Encode(&nvmeof.RWFields{Opcode: nvmeof.IORead, NSID: 7})
	wantStatus(t, io.exec(sqe, 512, nil), nvmeof.StatusInvalidNamespace.WithDNR(), "read of namespace 7")

	st := nsStatsOf(t, sub, 1)
	want := map[string]uint64{"generic": 1, "command_specific": 0, "media": 1, "path": 0, "vendor": 0}
	if st.InFlight != 0 || len(st.Errors) != len(want) {
		t.Fatalf("stats %+v, want nothing in flight and errors %v", st, want)
	}
	for k, v := range want {
		if st.Errors[k] != v {
			t.Fatalf("errors %v, want %v", st.Errors, want)
		}
	}
	// Resizing keeps the counters; a namespace removed and added again
	// starts afresh.
	if err := sub.NamespaceResized(1); err != nil {
		t.Fatal(err)
	}
	if st := nsStatsOf(t, sub, 1); st.Errors["generic"] != 1 {
		t.Fatalf("after a resize: %+v", st)
	}
	n := sub.namespace(1)
	if err := sub.RemoveNamespace(1); err != nil {
		t.Fatal(err)
	}
	if len(sub.NamespaceStats()) != 0 {
		t.Fatalf("stats of a removed namespace: %+v", sub.NamespaceStats())
	}
	if err := sub.AddNamespace(n.cfg); err != nil {
		t.Fatal(err)
	}
	if st := nsStatsOf(t, sub, 1); st.Errors["generic"] != 0 || st.InFlight != 0 {
		t.Fatalf("a namespace added again: %+v", st)
	}
}
