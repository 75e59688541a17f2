package host

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/rdisk/rdisk/blockdev"
	"github.com/rdisk/rdisk/nvmeof"
	"github.com/rdisk/rdisk/rdma"
	"github.com/rdisk/rdisk/rdma/rdmaq"
)

// Namespace is one namespace of a controller as a blockdev.Device. Its
// requests run on the controller's I/O queues; Request.Queue picks the
// queue. It is safe for concurrent use.
type Namespace struct {
	c      *Controller
	nsid   uint32
	id     nvmeof.IdentifyNamespace
	info   blockdev.Info
	shift  uint // log2 of the block size
	owned  bool // Close closes the controller
	closed atomic.Bool
}

var _ blockdev.Device = (*Namespace)(nil)

// Namespace opens namespace nsid for I/O.
func (c *Controller) Namespace(ctx context.Context, nsid uint32) (*Namespace, error) {
	if c.discovery {
		return nil, fmt.Errorf("%s is a discovery controller: it has no namespaces", c.subNQN)
	}
	if len(c.io) == 0 {
		return nil, fmt.Errorf("controller has no I/O queues")
	}
	id, err := c.IdentifyNamespace(ctx, nsid)
	if err != nil {
		return nil, err
	}
	if id.NSZE == 0 {
		return nil, fmt.Errorf("namespace %d of %s: %w", nsid, c.subNQN, ErrNoNamespace)
	}
	bs := id.BlockSize()
	if bs < 512 || bs > 65536 || bs&(bs-1) != 0 {
		return nil, fmt.Errorf("namespace %d: unsupported LBA format (FLBAS %#x, %d-byte blocks)", nsid, id.FLBAS, bs)
	}
	if f := id.LBAF[nvmeof.LBAFormatIndex(id.FLBAS)]; f.MS != 0 {
		return nil, fmt.Errorf("namespace %d: LBA format with %d bytes of metadata per block is not supported", nsid, f.MS)
	}
	if id.NSZE > uint64(1<<62)/uint64(bs) {
		return nil, fmt.Errorf("namespace %d: %d blocks is too large", nsid, id.NSZE)
	}
	shift := uint(0)
	for 1<<shift != bs {
		shift++
	}
	mt := c.maxTransfer - c.maxTransfer%int(bs)
	if mt < int(bs) {
		return nil, fmt.Errorf("namespace %d: %d-byte blocks exceed the %d-byte transfer limit", nsid, bs, c.maxTransfer)
	}
	mt = min(mt, 65536<<shift) // NLB is 16 bits
	caps := blockdev.CapFUA
	oncs := c.id.ONCS
	if c.id.VWC&nvmeof.VWCPresent != 0 {
		caps |= blockdev.CapFlush
	}
	if oncs&nvmeof.ONCSDSM != 0 {
		caps |= blockdev.CapDiscard
	}
	if oncs&nvmeof.ONCSWriteZeroes != 0 {
		caps |= blockdev.CapWriteZeroes
	}
	if id.NSATTR&nvmeof.NSATTRReadOnly != 0 {
		caps |= blockdev.CapReadOnly
	}
	u := URL{Transport: c.cfg.Transport, SubNQN: c.subNQN, NSID: nsid}
	u.Host, u.Port = splitAddr(c.addr)
	ns := &Namespace{
		c: c, nsid: nsid, id: id, shift: shift,
		info: blockdev.Info{
			Name:        u.String(),
			BlockSize:   int(bs),
			Size:        int64(id.NSZE) << shift,
			Queues:      len(c.io),
			QueueDepth:  c.ioDepth,
			MaxTransfer: mt,
			MaxZeroes:   min(int64(id.NSZE), 65536) << shift,
			Caps:        caps,
		},
	}
	return ns, nil
}

// Open connects to the subsystem a URL names, over the URL's transport
// (p may be nil for nvme+tcp://), and opens its namespace (the URL's NSID,
// or the first active namespace). Closing the Namespace closes the
// controller.
func Open(ctx context.Context, p rdma.Provider, u URL, cfg Config) (*Namespace, error) {
	if u.SubNQN == "" {
		return nil, fmt.Errorf("%s names no subsystem (want %s://HOST:PORT/SUBNQN[/NSID])", u, u.Scheme())
	}
	cfg.Transport = u.Transport.orDefault()
	c, err := Connect(ctx, p, u.Addr(), u.SubNQN, cfg)
	if err != nil {
		return nil, err
	}
	nsid := u.NSID
	if nsid == 0 {
		list, err := c.ActiveNamespaces(ctx)
		if err != nil {
			c.Close()
			return nil, err
		}
		if len(list) == 0 {
			c.Close()
			return nil, fmt.Errorf("subsystem %s has no active namespace", u.SubNQN)
		}
		nsid = list[0]
	}
	ns, err := c.Namespace(ctx, nsid)
	if err != nil {
		c.Close()
		return nil, err
	}
	ns.owned = true
	return ns, nil
}

// Controller returns the controller the namespace belongs to.
func (ns *Namespace) Controller() *Controller { return ns.c }

// NSID returns the namespace ID.
func (ns *Namespace) NSID() uint32 { return ns.nsid }

// Identify returns the Identify Namespace data read at open.
func (ns *Namespace) Identify() nvmeof.IdentifyNamespace { return ns.id }

// Info implements blockdev.Device.
func (ns *Namespace) Info() blockdev.Info { return ns.info }

// Close implements blockdev.Device: it closes the controller if Open made
// it, else it only stops further submissions (requests in flight complete
// normally).
func (ns *Namespace) Close() error {
	ns.closed.Store(true)
	if ns.owned {
		return ns.c.Close()
	}
	return nil
}

// AllocBuffer implements blockdev.Device: size bytes, 4096-aligned,
// registered with the controller's protection domain (RDMA; plain memory
// for TCP). Buffers serve every namespace of the controller.
func (ns *Namespace) AllocBuffer(size int) (blockdev.Buffer, error) { return ns.c.AllocBuffer(size) }

// AllocBuffer returns size bytes of registered memory for I/O.
func (c *Controller) AllocBuffer(size int) (blockdev.Buffer, error) {
	if c.Err() != nil {
		return nil, blockdev.ErrClosed
	}
	// One memory region with local rights only: the target reaches it
	// through per-I/O fast-registration keys. TCP needs no registration
	// (c.pd is nil): the queues read and write the memory themselves.
	return rdmaq.NewBuffer(c.pd, size, rdma.AccessLocalWrite, c)
}

// RegisterBuffer registers memory the caller owns for I/O on this
// controller, for callers that keep their own buffers (an optional
// capability beside blockdev.Device). mem must stay untouched in size and
// alive until Release; it need not be aligned.
func (ns *Namespace) RegisterBuffer(mem []byte) (blockdev.Buffer, error) {
	if ns.c.Err() != nil {
		return nil, blockdev.ErrClosed
	}
	return rdmaq.RegisterBuffer(ns.c.pd, mem, rdma.AccessLocalWrite, ns.c)
}

// Done is closed when the controller failed or was closed: requests then
// fail with errors matching blockdev.ErrClosed.
func (ns *Namespace) Done() <-chan struct{} { return ns.c.Done() }

// Submit implements blockdev.Device. It builds the command in a slot of the
// chosen queue and sends it; it does not allocate. Reads and writes need a
// buffer from this controller's AllocBuffer or RegisterBuffer.
func (ns *Namespace) Submit(r *blockdev.Request) error {
	if err := blockdev.Check(&ns.info, r); err != nil {
		return err
	}
	if ns.closed.Load() {
		return blockdev.ErrClosed
	}
	var buf *rdmaq.Buffer
	if r.Op == blockdev.OpRead || r.Op == blockdev.OpWrite {
		b, ok := r.Buf.(*rdmaq.Buffer)
		if !ok || !b.Usable(ns.c) {
			return blockdev.ErrBuffer
		}
		buf = b
	}
	return ns.c.io[uint(r.Queue)%uint(len(ns.c.io))].submit(ns, r, buf)
}
