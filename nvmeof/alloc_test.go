package nvmeof

import "testing"

// TestHotPathAllocs checks that the per-I/O codecs allocate nothing: a
// target parses every SQE and encodes every CQE, a host the reverse.
func TestHotPathAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation counts are not meaningful under -short builds")
	}
	capsule := make([]byte, SQESize+4096)
	SQE(capsule).RW().Encode(&RWFields{Opcode: IOWrite, CID: 1, NSID: 1, SLBA: 8, NLB: 7,
		DPTR: SGLFields{Identifier: SGLInCapsule, Length: 4096}})
	cqe := make([]byte, CQESize)
	cm := make([]byte, CMRequestSize)
	CMRequest(cm).Encode(&CMRequestFields{QID: 1, HRQSize: 128, HSQSize: 127})

	var sink uint64
	allocs := testing.AllocsPerRun(100, func() {
		s, kind, err := ParseCommand(capsule, false)
		if err != nil || kind != KindWrite {
			t.Fatal(err)
		}
		rw := s.RW()
		if err := s.DPTR().CheckRDMA(s.Direction() == DirHostToCtrl, 4096); err != nil {
			t.Fatal(err)
		}
		if err := CheckLBARange(rw.SLBA(), rw.Blocks(), 1<<20); err != nil {
			t.Fatal(err)
		}
		if err := CheckTransferLen(s.DPTR().Length(), uint64(rw.Blocks())*512); err != nil {
			t.Fatal(err)
		}
		sink += rw.SLBA() + uint64(rw.NLB())
		CQE(cqe).Encode(&CQEFields{SQHead: 1, SQID: 1, CID: s.CID()})
		c, err := ParseCQE(cqe)
		if err != nil {
			t.Fatal(err)
		}
		sink += uint64(c.Status()) + uint64(c.CID())
		SQE(capsule).RW().Encode(&RWFields{Opcode: IOWrite, CID: 1, NSID: 1, SLBA: 8, NLB: 7,
			DPTR: SGLFields{Identifier: SGLInCapsule, Length: 4096}})
		f, err := ParseCMRequest(cm)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Check(8, 128); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("hot path allocates %v times per I/O, want 0", allocs)
	}
	_ = sink
}
