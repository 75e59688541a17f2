package rdmaq

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/rdisk/rdisk/backstore"
	"github.com/rdisk/rdisk/rdma"
)

// pageBuffer returns n zeroed bytes starting on a page boundary. Go places
// a power-of-two allocation of a page or more, and any allocation larger
// than its small size classes, on a page boundary already: those need none
// of the extra page backstore.AlignedBuffer adds (it doubles a 4 KiB data
// buffer), which stays the fallback.
func pageBuffer(n int) []byte {
	if n >= pageSize && (n&(n-1) == 0 || n > 32<<10) {
		if b := make([]byte, n); uintptr(unsafe.Pointer(unsafe.SliceData(b)))%pageSize == 0 {
			return b
		}
	}
	return backstore.AlignedBuffer(n, pageSize)
}

// ctlBuffers are a queue's control buffers: messages that belong to no
// request, each sent from its own registered buffer with its own work
// request storage. Which ones are in use is the protocol's to track.
type ctlBuffers struct {
	buf []byte
	mr  rdma.MR
	n   int // bytes asked per buffer
	len int // stride
	wr  []ctlWR
}

type ctlWR struct {
	wr  rdma.SendWR
	sge [1]rdma.SGE
}

// init registers n buffers of size bytes on pd (none when n is 0).
func (c *ctlBuffers) init(pd rdma.PD, n, size int) error {
	if n <= 0 {
		return nil
	}
	c.n, c.len = size, roundUp(max(size, 1), 64)
	c.buf = pageBuffer(n * c.len)
	mr, err := pd.RegisterMemory(c.buf, rdma.AccessLocalWrite)
	if err != nil {
		return fmt.Errorf("registering control buffers: %w", err)
	}
	c.mr, c.wr = mr, make([]ctlWR, n)
	return nil
}

// get returns buffer i.
func (c *ctlBuffers) get(i int) []byte {
	return c.buf[i*c.len : i*c.len+c.n : i*c.len+c.n]
}

// send posts the first n bytes of buffer i on qp.
func (c *ctlBuffers) send(qp rdma.QP, i, n int, flags rdma.WRFlags) error {
	w := &c.wr[i]
	w.sge[0] = rdma.SGE{MR: c.mr, Offset: i * c.len, Length: n}
	w.wr = rdma.SendWR{ID: kindCtl | uint64(i), Op: rdma.OpSend, Flags: flags, SGL: w.sge[:]}
	if err := qp.PostSend(&w.wr); err != nil {
		return fmt.Errorf("rdmaq: posting a control message: %w", err)
	}
	return nil
}

// Buffer is memory for a host's requests (it implements blockdev.Buffer):
// page aligned and registered once with the host's PD, so the target
// reaches it through per-I/O fast-registration keys. It is safe for
// concurrent use.
type Buffer struct {
	owner    any
	b        []byte
	mr       rdma.MR
	released atomic.Bool
}

// NewBuffer returns size bytes registered on pd with access, belonging to
// owner (the session or controller whose requests may use it). A nil pd
// gives plain memory (iSCSI/TCP).
func NewBuffer(pd rdma.PD, size int, access rdma.Access, owner any) (*Buffer, error) {
	if size <= 0 {
		return nil, fmt.Errorf("rdmaq: buffer of %d bytes", size)
	}
	return RegisterBuffer(pd, backstore.AlignedBuffer(size, pageSize), access, owner)
}

// RegisterBuffer is NewBuffer over memory the caller owns: mem must stay
// alive, and keep its size, until Release.
func RegisterBuffer(pd rdma.PD, mem []byte, access rdma.Access, owner any) (*Buffer, error) {
	if len(mem) == 0 {
		return nil, fmt.Errorf("rdmaq: registering an empty buffer")
	}
	b := &Buffer{owner: owner, b: mem}
	if pd != nil {
		mr, err := pd.RegisterMemory(mem, access)
		if err != nil {
			return nil, fmt.Errorf("rdmaq: registering %d bytes: %w", len(mem), err)
		}
		b.mr = mr
	}
	return b, nil
}

// Bytes returns the memory.
func (b *Buffer) Bytes() []byte { return b.b }

// MR returns the registration (nil for plain memory).
func (b *Buffer) MR() rdma.MR { return b.mr }

// Usable reports whether requests of owner may use the buffer: it is
// owner's and not released.
func (b *Buffer) Usable(owner any) bool { return b.owner == owner && !b.released.Load() }

// Release deregisters the memory; later calls do nothing.
func (b *Buffer) Release() error {
	if b.released.Swap(true) || b.mr == nil {
		return nil
	}
	return b.mr.Deregister()
}
