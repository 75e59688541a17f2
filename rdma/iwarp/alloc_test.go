package iwarp

import (
	"testing"

	"github.com/rdisk/rdisk/rdma"
	"github.com/rdisk/rdisk/rdma/rdmatest"
)

// TestNoAllocations checks that steady-state work requests allocate
// nothing, counting included: RDMA Writes and Reads of one and of several
// FPDUs, and Sends. It does not call t.Parallel: testing.AllocsPerRun
// counts the allocations of the whole process (both providers' loops
// included), so it must run while no other test does.
func TestNoAllocations(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	c, s := rdmatest.Pair(t, func() rdma.Provider { return benchProvider() }, rdmatest.PairConfig{BufSize: 1 << 20, PostRecvs: 64, RecvSize: 4096})
	var wc [1]rdma.WC
	for _, tc := range []struct {
		name string
		op   rdma.Opcode
		n    int
	}{
		{"write-4k", rdma.OpRDMAWrite, 4 << 10},
		{"write-256k", rdma.OpRDMAWrite, 256 << 10},
		{"read-4k", rdma.OpRDMARead, 4 << 10},
		{"read-256k", rdma.OpRDMARead, 256 << 10},
		{"send-64", rdma.OpSend, 64},
	} {
		wr := rdma.SendWR{Op: tc.op, Flags: rdma.Signaled, SGL: []rdma.SGE{{MR: c.MR, Length: tc.n}},
			RemoteAddr: s.MR.VA() + 512<<10, RemoteKey: s.MR.RKey()}
		rwr := rdma.RecvWR{SGL: []rdma.SGE{{MR: s.MR, Length: 4096}}}
		once := func() {
			if err := c.QP.PostSend(&wr); err != nil {
				t.Fatal(err)
			}
			for c.SendCQ.Poll(wc[:]) == 0 {
				c.SendCQ.Wait(t.Context())
			}
			if wc[0].Status != rdma.StatusSuccess {
				t.Fatalf("%s: %s", tc.name, wc[0].Status)
			}
			if tc.op == rdma.OpSend {
				for s.RecvCQ.Poll(wc[:]) == 0 {
					s.RecvCQ.Wait(t.Context())
				}
				rwr.ID = wc[0].ID
				if err := s.QP.PostRecv(&rwr); err != nil {
					t.Fatal(err)
				}
			}
		}
		for range 20 {
			once()
		}
		if allocs := testing.AllocsPerRun(200, once); allocs > 0 {
			t.Errorf("%s: %.2f allocations per work request, want 0", tc.name, allocs)
		}
	}
}
