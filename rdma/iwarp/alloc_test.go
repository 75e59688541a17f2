package iwarp

import (
	"testing"

	"github.com/rdisk/rdisk/rdma"
	"github.com/rdisk/rdisk/rdma/rdmatest"
)

// TestNoAllocations checks that steady-state work requests allocate
// nothing, counting included: RDMA Writes and Reads of one and of several
// FPDUs, a Read into unregistered memory through the implicit write MR,
// and Sends. It does not call t.Parallel: testing.AllocsPerRun
// counts the allocations of the whole process (both providers' loops
// included), so it must run while no other test does.
func TestNoAllocations(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	c, s := rdmatest.Pair(t, func() rdma.Provider { return benchProvider() }, rdmatest.PairConfig{BufSize: 1 << 20, PostRecvs: 64, RecvSize: 4096})
	var wc [1]rdma.WC
	iw, err := c.PD.(rdma.ImplicitWritePD).RegisterImplicitWrite()
	if err != nil {
		t.Fatal(err)
	}
	defer iw.Deregister()
	// A RAM disk's chunks: unregistered memory an implicit-MR Read fills.
	chunks := make([]byte, 256<<10)
	implicit := []rdma.SGE{{MR: iw, Buf: chunks[:100<<10]}, {MR: iw, Buf: chunks[100<<10 : 164<<10]}, {MR: iw, Buf: chunks[164<<10:]}}
	for _, tc := range []struct {
		name string
		op   rdma.Opcode
		n    int
		sgl  []rdma.SGE
	}{
		{"read-256k-implicit", rdma.OpRDMARead, 256 << 10, implicit},
		{"write-4k", rdma.OpRDMAWrite, 4 << 10, nil},
		{"write-256k", rdma.OpRDMAWrite, 256 << 10, nil},
		{"read-4k", rdma.OpRDMARead, 4 << 10, nil},
		{"read-256k", rdma.OpRDMARead, 256 << 10, nil},
		{"send-64", rdma.OpSend, 64, nil},
	} {
		sgl := tc.sgl
		if sgl == nil {
			sgl = []rdma.SGE{{MR: c.MR, Length: tc.n}}
		}
		wr := rdma.SendWR{Op: tc.op, Flags: rdma.Signaled, SGL: sgl, RemoteAddr: s.MR.VA() + 512<<10, RemoteKey: s.MR.RKey()}
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
