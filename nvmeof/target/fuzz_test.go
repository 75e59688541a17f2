package target

import (
	"testing"

	"github.com/rdisk/rdisk/backstore"
	"github.com/rdisk/rdisk/nvmeof"
)

// fuzzTransport stands in for a transport binding: it counts completions,
// each sent at once, and lends one data buffer.
type fuzzTransport struct {
	responses int
	buf       []byte
}

func (f *fuzzTransport) respond(r *request) error {
	f.responses++
	r.sent()
	return nil
}

func (f *fuzzTransport) release(*request) error          { return nil }
func (f *fuzzTransport) buffer(*request) ([]byte, error) { return f.buf, nil }
func (f *fuzzTransport) disconnect()                     {}
func (f *fuzzTransport) finish()                         {}
func (f *fuzzTransport) trType() uint8                   { return nvmeof.TrTypeRDMA }

// FuzzCommand feeds arbitrary capsules to a queue of a live controller (or
// of none, to reach Connect) through the RDMA binding's decoding, with any
// RDMA Read the command asks for completed at once: nothing may panic, and
// every command but a parked AER is answered with exactly one response.
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
	disk := sub.namespace(1).cfg.Disk.(*backstore.Mem)
	f.Fuzz(func(t *testing.T, capsule []byte, mode uint8) {
		qid := uint16(mode % 2) // mode 0: admin; 1: I/O; 2, 3: no controller yet
		if len(capsule) < nvmeof.SQESize {
			return // a capsule too short to answer breaks the queue, as in nvmet
		}
		capsule = capsule[:min(len(capsule), nvmeof.SQESize+port.cfg.InlineDataSize)]
		tr := &fuzzTransport{buf: make([]byte, mdts)}
		q := newSQ(port, qid, 32, 64, tr)
		defer q.close()
		if mode < 2 {
			c := &controller{t: tg, sub: sub, port: port, hostNQN: hostNQN, maxQ: 4, grantedQ: 4,
				queues: map[uint16]*sq{qid: q}, wce: true, features: map[uint8]uint32{}, csts: nvmeof.CSTSReady}
			id, err := sub.allocController(c)
			if err != nil {
				t.Fatal(err)
			}
			c.cntlid = id
			defer c.teardown("fuzz done", nil)
			q.ctrl = c
		}
		x := &rdmaReq{}
		copy(x.sqe[:], capsule)
		var inCapsule []byte
		if len(capsule) > nvmeof.SQESize {
			inCapsule = capsule[nvmeof.SQESize:]
		}
		q.received()
		var err error
		switch x.decode(q, inCapsule, false) {
		case planRespond:
			err = q.respond(&x.request)
		case planRun:
			err = q.run(&x.request)
		case planBuffer:
			// The RDMA Read, if any, completes at once: into the disk for
			// a placed write (as the RDMA binding does, on I/O queues), else
			// into the buffer.
			if !q.placeWrite(&x.request) {
				x.xfer = tr.buf[:x.xferLen]
			}
			err = q.run(&x.request)
		}
		if err != nil {
			t.Fatalf("running the command: %v", err)
		}
		q.close() // the workers are done
		if x.state != reqParked && tr.responses != 1 {
			t.Fatalf("%d responses to one command", tr.responses)
		}
		if x.placer != nil {
			t.Fatal("a placed write is neither finished nor given up")
		}
		if n := disk.Stats().InFlight; n != 0 {
			t.Fatalf("%d disk requests in flight after the command", n)
		}
	})
}
