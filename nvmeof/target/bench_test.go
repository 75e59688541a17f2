package target

import (
	"sync/atomic"
	"testing"

	"github.com/rdisk/rdisk/nvmeof"
)

// The core's per-command cost without a transport: 4 KiB Reads and Writes
// on a RAM namespace through the RDMA binding's decoding, begin, run and
// respond, on I/O queues of one live controller, whose transport
// (fuzzTransport) answers at once; and placed Writes (sq.placeWrite),
// whose RDMA Read into the disk's memory is taken as done.

// coreQueue is an I/O queue qid of controller c on a request slot of its
// own, running one command in a loop.
type coreQueue struct {
	q       *sq
	x       rdmaReq
	tr      *fuzzTransport
	capsule [nvmeof.SQESize]byte
	placed  bool // a placed write
}

// coreController returns a live controller of the test target's subsystem
// with grantedQ I/O queues allowed.
func coreController(tb testing.TB, grantedQ int) (*Target, *controller) {
	tb.Helper()
	tg, sub, _ := testTarget(tb, 4<<20)
	port := tg.ports[1]
	c := &controller{t: tg, sub: sub, port: port, hostNQN: hostNQN, maxQ: grantedQ, grantedQ: grantedQ,
		queues: map[uint16]*sq{}, wce: true, features: map[uint8]uint32{}, csts: nvmeof.CSTSReady}
	if _, err := sub.allocController(c); err != nil {
		tb.Fatal(err)
	}
	return tg, c
}

// newCoreQueue adds I/O queue qid to c, its command a Read or Write
// (op) of 8 blocks, or a placed Write (tc.placed) of tc.blocks.
func newCoreQueue(tb testing.TB, c *controller, qid uint16, tc coreOp) *coreQueue {
	tb.Helper()
	blocks := max(tc.blocks, 8)
	cq := &coreQueue{tr: &fuzzTransport{buf: make([]byte, mdts)}, placed: tc.placed}
	cq.q = newSQ(c.port, qid, 32, 64, cq.tr)
	tb.Cleanup(cq.q.close)
	cq.q.ctrl = c
	c.mu.Lock()
	c.queues[qid] = cq.q
	c.mu.Unlock()
	s := nvmeof.SQE(cq.capsule[:])
	s.RW().Encode(&nvmeof.RWFields{Opcode: tc.op, NSID: 1, SLBA: uint64(blocks) * uint64(qid), NLB: uint16(blocks - 1)})
	cq.capsule[1] |= 0x40
	nvmeof.SGL(cq.capsule[24:40]).Encode(&nvmeof.SGLFields{Identifier: nvmeof.SGLKeyed, Address: 0x1000, Length: uint32(blocks * 512), Key: 0x100})
	return cq
}

// once runs the queue's command: decode, the RDMA Read (if any) done at
// once, run and respond.
func (cq *coreQueue) once(tb testing.TB) {
	x := &cq.x
	x.sqe = cq.capsule
	cq.q.received()
	if x.decode(cq.q, nil, false) != planBuffer {
		tb.Fatalf("command not decoded as a data transfer: status %s", x.status)
	}
	if cq.placed {
		if !cq.q.placeWrite(&x.request) {
			tb.Fatal("write not placed")
		}
	} else {
		x.xfer = cq.tr.buf[:x.xferLen]
	}
	if err := cq.q.run(&x.request); err != nil {
		tb.Fatal(err)
	}
	if x.status != nvmeof.StatusSuccess {
		tb.Fatalf("status %s", x.status)
	}
}

type coreOp struct {
	name   string
	op     uint8
	placed bool
	blocks int // default 8
}

var coreOps = []coreOp{{name: "read-4k", op: nvmeof.IORead}, {name: "write-4k", op: nvmeof.IOWrite},
	{name: "write-4k-placed", op: nvmeof.IOWrite, placed: true}, {name: "write-128k-placed", op: nvmeof.IOWrite, placed: true, blocks: 256}}

func BenchmarkCore(b *testing.B) {
	for _, tc := range coreOps {
		b.Run(tc.name, func(b *testing.B) {
			_, c := coreController(b, 1)
			cq := newCoreQueue(b, c, 1, tc)
			b.ReportAllocs()
			for b.Loop() {
				cq.once(b)
			}
		})
	}
}

// BenchmarkCoreParallel runs the commands on as many queues of one
// controller as the benchmark has goroutines, on one namespace: what the
// queues share (the controller, the namespace) is touched from every
// core.
func BenchmarkCoreParallel(b *testing.B) {
	for _, tc := range coreOps {
		b.Run(tc.name, func(b *testing.B) {
			_, c := coreController(b, 128)
			var qid atomic.Uint32
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				cq := newCoreQueue(b, c, uint16(qid.Add(1)), tc)
				for pb.Next() {
					cq.once(b)
				}
			})
		})
	}
}

// TestCoreAllocs checks that the core executes a Read, a Write and a
// placed Write without allocating (not in parallel: AllocsPerRun counts the
// whole process).
func TestCoreAllocs(t *testing.T) {
	_, c := coreController(t, len(coreOps))
	for i, tc := range coreOps {
		cq := newCoreQueue(t, c, uint16(i+1), tc)
		for range 10 {
			cq.once(t)
		}
		if n := testing.AllocsPerRun(200, func() { cq.once(t) }); n != 0 {
			t.Errorf("%s: %.1f allocations per command, want 0", tc.name, n)
		}
	}
}
