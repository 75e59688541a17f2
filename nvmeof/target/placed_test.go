package target

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rdisk/rdisk/backstore"
	"github.com/rdisk/rdisk/nvmeof"
	"github.com/rdisk/rdisk/rdma"
)

// Placed writes (sq.placeWrite): a keyed-SGL Write on an RDMA I/O queue to
// a RAM disk RDMA-Reads its data straight into the disk's chunks.

// placeCounter is a RAM disk counting the placements it began.
type placeCounter struct {
	*backstore.Mem
	places atomic.Int64
}

func (d *placeCounter) PlaceAt(segs [][]byte, off int64, n int) (backstore.Placement, error) {
	p, err := d.Mem.PlaceAt(segs, off, n)
	if err == nil {
		d.places.Add(1)
	}
	return p, err
}

// copyOnly is a RAM disk offering nothing but backstore.Disk: writes take
// the copy path, as on any disk without placement.
type copyOnly struct{ backstore.Disk }

// ioQueues connects a controller with n I/O queues of depth 16.
func ioQueues(t *testing.T, addr string, n int) []*tq {
	t.Helper()
	aq, cntlid := admin(t, addr, testNQN, hostNQN, 0)
	sqe := make(nvmeof.SQE, 64)
	sqe.Features().Encode(&nvmeof.FeaturesFields{Opcode: nvmeof.AdminSetFeatures, FID: nvmeof.FeatNumQueues, CDW11: nvmeof.NumQueuesValue(uint16(n-1), uint16(n-1))})
	must(t, aq.exec(sqe, 0, nil), "set number of queues")
	qs := make([]*tq, n)
	for i := range qs {
		qs[i] = ioQueue(t, addr, uint16(i+1), cntlid, 16)
	}
	return qs
}

func newMem(t testing.TB, size int64) *backstore.Mem {
	t.Helper()
	m, err := backstore.NewMem(size, 512)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// TestPlacedWrite writes through the placed path at chunk-aligned and
// unaligned offsets, over up to three chunks, with and without FUA, and
// reads each back byte-exact, over the wire and from the disk; each write
// was placed, and each counts as one write of the disk.
func TestPlacedWrite(t *testing.T) {
	t.Parallel()
	disk := &placeCounter{Mem: newMem(t, 64<<20)}
	_, _, addr := diskTarget(t, disk)
	io := ioQueues(t, addr, 1)[0]
	const chunkBlocks = backstore.MemChunkSize / 512
	for i, c := range []struct {
		slba   uint64
		blocks int
	}{
		{0, 1},
		{chunkBlocks, chunkBlocks},           // one whole chunk
		{2 * chunkBlocks, 256},               // 128 KiB, two chunks, aligned
		{5*chunkBlocks + 1, 256},             // 128 KiB from 512 bytes in: three chunks
		{8*chunkBlocks - 1, 2},               // across a chunk boundary
		{10*chunkBlocks + 100, 255},          // unaligned start and length
		{64<<20/512 - 256, 256},              // the disk's last 128 KiB
		{5*chunkBlocks + 1 + 256 - 8, 16},    // overlapping an earlier write's end
		{12*chunkBlocks + chunkBlocks/2, 64}, // inside one chunk
	} {
		n := c.blocks * 512
		want := make([]byte, n)
		rand.Read(want)
		copy(io.data(), want)
		before := disk.Stats()
		places := disk.places.Load()
		fua := i%2 == 1
		must(t, rw(io, true, c.slba, c.blocks, fua), fmt.Sprintf("write of %d blocks at %d", c.blocks, c.slba))
		if got := disk.places.Load() - places; got != 1 {
			t.Fatalf("write of %d blocks at %d: %d placements, want 1", c.blocks, c.slba, got)
		}
		after := disk.Stats()
		if after.Write.Ops != before.Write.Ops+1 || after.Write.Bytes != before.Write.Bytes+uint64(n) || after.InFlight != 0 {
			t.Fatalf("write stats before %+v after %+v", before.Write, after.Write)
		}
		if fua != (after.FUAWrites == before.FUAWrites+1) {
			// The controller's volatile write cache is on: only FUA writes are.
			t.Fatalf("FUA %v: FUA writes %d -> %d", fua, before.FUAWrites, after.FUAWrites)
		}
		clear(io.data()[:n])
		must(t, rw(io, false, c.slba, c.blocks, false), "read back")
		if !bytes.Equal(io.data()[:n], want) {
			t.Fatalf("write of %d blocks at %d: read back differs", c.blocks, c.slba)
		}
		got := make([]byte, n)
		if err := disk.ReadAt(got, int64(c.slba)*512); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("write of %d blocks at %d: the disk holds other data (%v)", c.blocks, c.slba, err)
		}
	}
}

// TestPlacedWriteConcurrent writes from four queues at once to disjoint
// ranges that share chunks (each queue its own 4 KiB of every 16 KiB, and
// 128 KiB ranges of its own region over three chunks), then checks the
// whole disk against what each wrote.
func TestPlacedWriteConcurrent(t *testing.T) {
	t.Parallel()
	const size = 16 << 20
	disk := &placeCounter{Mem: newMem(t, size)}
	_, _, addr := diskTarget(t, disk)
	qs := ioQueues(t, addr, 4)
	want := make([]byte, size)
	var wg sync.WaitGroup
	for qi, io := range qs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 128<<10)
			for i := range 24 {
				var slba uint64
				var blocks int
				k := i / 2
				if i%2 == 0 {
					// Its own 4 KiB of a 16 KiB stripe that every queue writes.
					slba, blocks = uint64(k*16384+qi*4096)/512, 8
				} else {
					// 128 KiB of its own 3 MiB region, 512 bytes past a chunk
					// boundary: three chunks.
					slba, blocks = uint64(4<<20+qi*(3<<20)+k*3*backstore.MemChunkSize+512)/512, 256
				}
				n := blocks * 512
				rand.Read(buf[:n])
				copy(io.data(), buf[:n])
				if f := rw(io, true, slba, blocks, false); f.Status != nvmeof.StatusSuccess {
					t.Errorf("queue %d write at %d: %s", qi+1, slba, f.Status)
					return
				}
				copy(want[slba*512:], buf[:n]) // ranges of different queues are disjoint
				clear(io.data()[:n])
				if f := rw(io, false, slba, blocks, false); f.Status != nvmeof.StatusSuccess || !bytes.Equal(io.data()[:n], buf[:n]) {
					t.Errorf("queue %d read back at %d: %s, equal %v", qi+1, slba, f.Status, bytes.Equal(io.data()[:n], buf[:n]))
					return
				}
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	got := make([]byte, size)
	if err := disk.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("the disk differs from the writes at byte %d", i)
			}
		}
	}
	if n := disk.places.Load(); n != 4*24 {
		t.Fatalf("%d placements, want %d", n, 4*24)
	}
}

// TestPlacedWriteStatuses: commands that fail before the fetch take the
// copy path and fail as they do on a disk without placement, with the same
// statuses; commands the placed path does not serve (Compare, in-capsule
// data) work as before; nothing is left in flight on the disk.
func TestPlacedWriteStatuses(t *testing.T) {
	t.Parallel()
	type result struct {
		what   string
		status nvmeof.Status
	}
	run := func(t *testing.T, disk backstore.Disk, mem *backstore.Mem) []result {
		_, _, addr := diskTarget(t, disk)
		io := ioQueues(t, addr, 1)[0]
		const nsze = 8 << 20 / 512
		var out []result
		add := func(what string, f nvmeof.CQEFields) { out = append(out, result{what, f.Status}) }
		add("write", rw(io, true, 8, 8, false))
		add("write past the end", rw(io, true, nsze-1, 2, false))
		add("write starting past the end", rw(io, true, nsze, 1, false))
		sqe := make(nvmeof.SQE, 64)
		sqe.RW().Encode(&nvmeof.RWFields{Opcode: nvmeof.IOWrite, NSID: 1, SLBA: 0, NLB: 7})
		add("SGL shorter than NLB", io.exec(sqe, 512, nil))
		sqe = make(nvmeof.SQE, 64)
		sqe.RW().Encode(&nvmeof.RWFields{Opcode: nvmeof.IOWrite, NSID: 1, SLBA: 0, NLB: 0})
		add("SGL longer than NLB", io.exec(sqe, 4096, nil))
		sqe = make(nvmeof.SQE, 64)
		sqe.RW().Encode(&nvmeof.RWFields{Opcode: nvmeof.IOWrite, NSID: 9, SLBA: 0, NLB: 0})
		add("unknown namespace", io.exec(sqe, 512, nil))
		sqe = make(nvmeof.SQE, 64)
		sqe.RW().Encode(&nvmeof.RWFields{Opcode: nvmeof.IOWrite, NSID: 1, SLBA: 0, NLB: 511})
		add("write over MDTS", io.exec(sqe, 512*512, nil))
		mem.SetReadOnly(true)
		add("write to a write-protected namespace", rw(io, true, 8, 8, false))
		add("FUA write to a write-protected namespace", rw(io, true, 8, 8, true))
		mem.SetReadOnly(false)
		add("write once writable again", rw(io, true, 8, 8, false))
		copy(io.data(), bytes.Repeat([]byte{7}, 4096))
		must(t, rw(io, true, 16, 8, false), "write")
		sqe = make(nvmeof.SQE, 64)
		sqe.RW().Encode(&nvmeof.RWFields{Opcode: nvmeof.IOCompare, NSID: 1, SLBA: 16, NLB: 7})
		add("compare equal", io.exec(sqe, 4096, nil))
		io.data()[100] ^= 1
		add("compare different", io.exec(sqe, 4096, nil))
		small := bytes.Repeat([]byte("in-capsule"), 52)[:512]
		sqe = make(nvmeof.SQE, 64)
		sqe.RW().Encode(&nvmeof.RWFields{Opcode: nvmeof.IOWrite, NSID: 1, SLBA: 40, NLB: 0})
		add("in-capsule write", io.exec(sqe, 0, small))
		got := make([]byte, 512)
		if err := mem.ReadAt(got, 40*512); err != nil || !bytes.Equal(got, small) {
			t.Fatalf("in-capsule write not on the disk (%v)", err)
		}
		if n := mem.Stats().InFlight; n != 0 {
			t.Fatalf("%d requests in flight on the disk", n)
		}
		return out
	}
	placed := &placeCounter{Mem: newMem(t, 8<<20)}
	got := run(t, placed, placed.Mem)
	if n := placed.places.Load(); n != 3 {
		t.Errorf("%d placements, want 3 (the successful keyed writes)", n)
	}
	plain := newMem(t, 8<<20)
	want := run(t, copyOnly{plain}, plain)
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("%s: status %s with placement, %s without", want[i].what, got[i].status, want[i].status)
		}
	}
	for _, w := range []struct {
		i  int
		st nvmeof.Status
	}{
		{0, nvmeof.StatusSuccess}, {1, nvmeof.StatusLBAOutOfRange.WithDNR()}, {3, nvmeof.StatusSGLInvalidDataLength.WithDNR()},
		{5, nvmeof.StatusInvalidNamespace.WithDNR()}, {6, nvmeof.StatusInvalidField.WithDNR()},
		{7, nvmeof.StatusNamespaceWriteProtected.WithDNR()}, {9, nvmeof.StatusSuccess},
		{11, nvmeof.StatusCompareFailure.WithDNR()}, {12, nvmeof.StatusSuccess},
	} {
		if want[w.i].status != w.st {
			t.Errorf("%s: status %s, want %s", want[w.i].what, want[w.i].status, w.st)
		}
	}
}

// TestPlacedWriteReadFails: a write whose RDMA Read the host refuses (a
// wrong key) ends the connection unanswered, as on the copy path, and the
// placement is given up: nothing stays in flight on the disk, and the
// write is not counted.
func TestPlacedWriteReadFails(t *testing.T) {
	t.Parallel()
	for _, placed := range []bool{true, false} {
		t.Run(fmt.Sprintf("placed=%v", placed), func(t *testing.T) {
			t.Parallel()
			mem := newMem(t, 8<<20)
			pc := &placeCounter{Mem: mem}
			var disk backstore.Disk = pc
			if !placed {
				disk = copyOnly{mem}
			}
			_, _, addr := diskTarget(t, disk)
			io := ioQueues(t, addr, 1)[0]
			before := mem.Stats()
			capsule := make([]byte, 64)
			nvmeof.SQE(capsule).RW().Encode(&nvmeof.RWFields{Opcode: nvmeof.IOWrite, NSID: 1, SLBA: 128, NLB: 255})
			capsule[1] |= 0x40
			capsule[2] = 0x77
			nvmeof.SGL(capsule[24:40]).Encode(&nvmeof.SGLFields{Identifier: nvmeof.SGLKeyed, Address: io.mr.VA() + tqDataOff,
				Length: 128 << 10, Key: io.mr.RKey() ^ 0x5a})
			copy(io.buf, capsule)
			if err := io.qp.PostSend(&rdma.SendWR{Op: rdma.OpSend, SGL: []rdma.SGE{{MR: io.mr, Length: len(capsule)}}}); err != nil {
				t.Fatal(err)
			}
			select {
			case <-io.qp.Done():
			case <-time.After(10 * time.Second):
				t.Fatal("the connection survived a refused RDMA Read")
			}
			var wc [4]rdma.WC
			for k := io.cq.Poll(wc[:]); k > 0; k = io.cq.Poll(wc[:]) {
				for _, c := range wc[:k] {
					if c.Op == rdma.OpRecv && c.Status == rdma.StatusSuccess {
						t.Fatalf("a completion arrived for the failed write")
					}
				}
			}
			deadline := time.Now().Add(10 * time.Second)
			for mem.Stats().InFlight != 0 {
				if time.Now().After(deadline) {
					t.Fatalf("%d requests still in flight on the disk", mem.Stats().InFlight)
				}
				time.Sleep(5 * time.Millisecond)
			}
			if after := mem.Stats(); after.Write.Ops != before.Write.Ops {
				t.Fatalf("the failed write counted: %d writes, was %d", after.Write.Ops, before.Write.Ops)
			}
			if got := pc.places.Load(); placed != (got == 1) {
				t.Fatalf("%d placements", got)
			}
		})
	}
}
