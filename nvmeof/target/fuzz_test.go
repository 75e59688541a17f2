package target

import (
	"testing"

	"github.com/rdisk/rdisk/nvmeof"
	"github.com/rdisk/rdisk/rdma"
)

// FuzzCommand feeds arbitrary capsules to a queue of a live controller (or
// of none, to reach Connect) and completes any RDMA Read the command asks
// for: nothing may panic, and every command but a parked AER is answered
// with exactly one response.
func FuzzCommand(f *testing.F) {
	seed := func(fill func(nvmeof.SQE)) []byte {
		b := make([]byte, 64)
		fill(nvmeof.SQE(b))
		b[1] |= 0x40
		nvmeof.SGL(b[24:40]).Encode(&nvmeof.SGLFields{Identifier: nvmeof.SGLKeyed, Address: 0x1000, Length: 4096, Key: 0x100})
		return b
	}
	f.Add(seed(func(s nvmeof.SQE) {
		s.RW().Encode(&nvmeof.RWFields{Opcode: nvmeof.IORead, NSID: 1, SLBA: 8, NLB: 7})
	}), uint8(1))
	f.Add(seed(func(s nvmeof.SQE) {
		s.RW().Encode(&nvmeof.RWFields{Opcode: nvmeof.IOWrite, NSID: 1, SLBA: 8, NLB: 7})
	}), uint8(1))
	f.Add(seed(func(s nvmeof.SQE) { s.Identify().Encode(&nvmeof.IdentifyFields{CNS: nvmeof.CNSController}) }), uint8(0))
	f.Add(seed(func(s nvmeof.SQE) {
		s.GetLogPage().Encode(&nvmeof.GetLogPageFields{LID: nvmeof.LogSMART, NUMD: 127, NSID: nvmeof.NSIDAll})
	}), uint8(0))
	f.Add(seed(func(s nvmeof.SQE) { s.Connect().Encode(&nvmeof.ConnectFields{QID: 0, SQSize: 31}) }), uint8(2))
	f.Add(seed(func(s nvmeof.SQE) { s.DSM().Encode(&nvmeof.DSMFields{NSID: 1, Attributes: nvmeof.DSMDeallocate}) }), uint8(1))
	withData := append(seed(func(s nvmeof.SQE) {
		s.RW().Encode(&nvmeof.RWFields{Opcode: nvmeof.IOWrite, NSID: 1, SLBA: 1, NLB: 0})
	}), make([]byte, 512)...)
	nvmeof.SGL(withData[24:40]).Encode(&nvmeof.SGLFields{Identifier: nvmeof.SGLTypeDataBlock<<4 | nvmeof.SGLSubtypeOffset, Length: 512})
	f.Add(withData, uint8(1))

	tg, sub, _ := testTarget(f, 4<<20)
	port := tg.ports[1]
	f.Fuzz(func(t *testing.T, capsule []byte, mode uint8) {
		qid := uint16(mode % 2) // mode 0: admin; 1: I/O; 2, 3: no controller yet
		q, err := port.newQueue(nvmeof.CMRequestFields{QID: qid, HSQSize: 31, HRQSize: 32})
		if err != nil {
			t.Fatal(err)
		}
		defer q.free_()
		// The capsule "arrives" in receive slot 0 without a real receive:
		// give the queue a QP whose receive queue has room to repost it.
		q.qp.Close()
		if q.qp, err = q.pd.CreateQP(rdma.QPConfig{SendCQ: q.cq, RecvCQ: q.cq, MaxSendWR: 4 * q.depth, MaxRecvWR: q.depth, MaxSendSGE: maxDataSGE, MaxRecvSGE: 2}); err != nil {
			t.Fatal(err)
		}
		if mode < 2 {
			c := &controller{t: tg, sub: sub, port: port, hostNQN: hostNQN, maxQ: 4, grantedQ: 4,
				queues: map[uint16]*queue{qid: q}, wce: true, features: map[uint8]uint32{}, csts: nvmeof.CSTSReady}
			id, err := sub.allocController(c)
			if err != nil {
				t.Fatal(err)
			}
			c.cntlid = id
			defer c.teardown("fuzz done")
			q.ctrl = c
		}
		if len(capsule) > q.stride {
			capsule = capsule[:q.stride]
		}
		// A receive scatters the SQE and the in-capsule data.
		copy(q.sqeBuf(0), capsule)
		if len(capsule) > nvmeof.SQESize {
			copy(q.inData(0, len(capsule)-nvmeof.SQESize), capsule[nvmeof.SQESize:])
		}
		if err := q.onCommand(0, len(capsule)); err != nil {
			return // a capsule too short to answer breaks the queue, as in nvmet
		}
		for i := range q.rsps {
			r := &q.rsps[i]
			if r.state == rspReading {
				if err := q.complete(&rdma.WC{ID: wrTag + uint64(i), Op: rdma.OpRDMARead}); err != nil {
					t.Fatalf("completing the RDMA Read: %v", err)
				}
			}
		}
		responded := 0
		for i := range q.rsps {
			if q.rsps[i].state == rspResponded {
				responded++
			}
		}
		if !anyParked(q) && responded != 1 {
			t.Fatalf("%d responses to one command", responded)
		}
	})
}

func anyParked(q *queue) bool {
	for i := range q.rsps {
		if q.rsps[i].state == rspParked {
			return true
		}
	}
	return false
}
