package host

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/rdisk/rdisk/blockdev"
	"github.com/rdisk/rdisk/nvmeof"
	"github.com/rdisk/rdisk/rdma"
	"github.com/rdisk/rdisk/rdma/rdmaq"
)

// Namespace is one namespace of a controller as a blockdev.Device. Its
// requests run on the controller's I/O queues; Request.Queue picks the
// queue. It is safe for concurrent use.
//
// The controller keeps it up to date: on a Namespace Attribute Changed
// event that names it (or all namespaces), it re-reads Identify Namespace
// (see Refresh) before it calls Config.OnEvent, so Info and Identify
// return the new size from then on. A namespace that is gone is marked
// Removed; requests are still sent, and the target fails them (Invalid
// Namespace or Format) until the namespace comes back.
type Namespace struct {
	c         *Controller
	nsid      uint32
	shift     uint // log2 of the block size; fixed at open
	state     atomic.Pointer[nsState]
	refreshMu sync.Mutex // orders Refresh calls
	owned     bool       // Close closes the controller
	closed    atomic.Bool
	// access is the blockdev.AccessState of the namespace's ANA group
	// (ana.go); diskID is DiskID, fixed at open.
	access atomic.Uint32
	diskID string
}

// nsState is what a Namespace knows of its namespace. Refresh replaces it
// whole (it is never changed), so Submit checks requests against one
// consistent snapshot with one atomic load.
type nsState struct {
	id   nvmeof.IdentifyNamespace
	info blockdev.Info
	// removed: the last Identify found the namespace inactive; id and info
	// are the last ones it had.
	removed bool
	// failed, when set, is what Submit returns: the namespace changed in a
	// way requests built for the old one must not reach (a new block
	// size).
	failed error
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
	info, shift, err := c.namespaceInfo(nsid, &id)
	if err != nil {
		return nil, err
	}
	ns := &Namespace{c: c, nsid: nsid, shift: shift}
	if ids, err := c.NamespaceIDs(ctx, nsid); err == nil {
		ns.diskID = diskID(c.subNQN, &id, &ids)
	} else {
		// Before NVMe 1.3 a controller need not have the list.
		c.log.Debug("nvme host: no namespace identification descriptors", "subnqn", c.subNQN, "nsid", nsid, "err", err)
		ns.diskID = diskID(c.subNQN, &id, nil)
	}
	ns.state.Store(&nsState{id: id, info: info})
	c.nsMu.Lock()
	if c.open == nil {
		c.open = map[*Namespace]struct{}{}
	}
	c.open[ns] = struct{}{}
	c.nsMu.Unlock()
	c.openANA(ctx, ns)
	return ns, nil
}

// namespaceInfo checks the Identify Namespace data of nsid and derives the
// blockdev.Info and the block shift from it.
func (c *Controller) namespaceInfo(nsid uint32, id *nvmeof.IdentifyNamespace) (blockdev.Info, uint, error) {
	bs := id.BlockSize()
	if bs < 512 || bs > 65536 || bs&(bs-1) != 0 {
		return blockdev.Info{}, 0, fmt.Errorf("namespace %d: unsupported LBA format (FLBAS %#x, %d-byte blocks)", nsid, id.FLBAS, bs)
	}
	if f := id.LBAF[nvmeof.LBAFormatIndex(id.FLBAS)]; f.MS != 0 {
		return blockdev.Info{}, 0, fmt.Errorf("namespace %d: LBA format with %d bytes of metadata per block is not supported", nsid, f.MS)
	}
	if id.NSZE > uint64(1<<62)/uint64(bs) {
		return blockdev.Info{}, 0, fmt.Errorf("namespace %d: %d blocks is too large", nsid, id.NSZE)
	}
	shift := uint(0)
	for 1<<shift != bs {
		shift++
	}
	mt := c.maxTransfer - c.maxTransfer%int(bs)
	if mt < int(bs) {
		return blockdev.Info{}, 0, fmt.Errorf("namespace %d: %d-byte blocks exceed the %d-byte transfer limit", nsid, bs, c.maxTransfer)
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
	return blockdev.Info{
		Name:        u.String(),
		BlockSize:   int(bs),
		Size:        int64(id.NSZE) << shift,
		Queues:      len(c.io),
		QueueDepth:  c.ioDepth,
		MaxTransfer: mt,
		MaxZeroes:   min(int64(id.NSZE), 65536) << shift,
		Caps:        caps,
	}, shift, nil
}

// Refresh re-reads the Identify Namespace data and updates what Info and
// Identify return (the controller does it on a Namespace Attribute Changed
// event). When the namespace is no longer active (Identify returns zeroes,
// or a status with DNR, as for an unknown NSID) it is marked Removed, Info
// keeps the last size and Refresh returns an error wrapping ErrNoNamespace;
// a later Refresh that finds it again clears the mark. When its block size
// changed, or it became unusable, requests fail in Submit from then on
// with the error Refresh returns. Other failures (the controller did not
// answer) change nothing.
func (ns *Namespace) Refresh(ctx context.Context) error {
	if ns.closed.Load() {
		return blockdev.ErrClosed
	}
	ns.refreshMu.Lock()
	defer ns.refreshMu.Unlock()
	old := ns.state.Load()
	c := ns.c
	id, err := c.IdentifyNamespace(ctx, ns.nsid)
	var se *StatusError
	switch {
	case errors.As(err, &se) && se.Status.DNR():
		return ns.markRemoved(old, se.Status.String())
	case err != nil:
		return fmt.Errorf("re-identifying namespace %d of %s: %w", ns.nsid, c.subNQN, err)
	case id.NSZE == 0:
		return ns.markRemoved(old, "inactive (Identify Namespace is all zeroes)")
	}
	info, shift, err := c.namespaceInfo(ns.nsid, &id)
	if err == nil && shift != ns.shift {
		err = fmt.Errorf("namespace %d of %s: the block size changed from %d to %d bytes: reopen it", ns.nsid, c.subNQN, 1<<ns.shift, 1<<shift)
	}
	if err != nil {
		c.log.Warn("nvme host: namespace changed and is unusable", "subnqn", c.subNQN, "nsid", ns.nsid, "err", err)
		ns.state.Store(&nsState{id: id, info: old.info, failed: err})
		return err
	}
	ns.state.Store(&nsState{id: id, info: info})
	switch {
	case old.removed || old.failed != nil:
		c.log.Info("nvme host: namespace is back", "subnqn", c.subNQN, "nsid", ns.nsid, "size", info.Size)
	case old.info.Size != info.Size:
		c.log.Info("nvme host: namespace resized", "subnqn", c.subNQN, "nsid", ns.nsid, "old_size", old.info.Size, "size", info.Size)
	}
	return nil
}

// markRemoved records that the namespace is gone; requests still go to
// the target, which fails them.
func (ns *Namespace) markRemoved(old *nsState, why string) error {
	if !old.removed {
		ns.c.log.Warn("nvme host: namespace removed", "subnqn", ns.c.subNQN, "nsid", ns.nsid, "reason", why)
	}
	ns.state.Store(&nsState{id: old.id, info: old.info, removed: true})
	return fmt.Errorf("namespace %d of %s: %w (%s)", ns.nsid, ns.c.subNQN, ErrNoNamespace, why)
}

// refreshNamespaces refreshes the open namespaces that a Namespace
// Attribute Changed event names (all of them when all is set).
func (c *Controller) refreshNamespaces(nsids []uint32, all bool) {
	c.nsMu.Lock()
	var todo []*Namespace
	for ns := range c.open {
		if all || slices.Contains(nsids, ns.nsid) {
			todo = append(todo, ns)
		}
	}
	c.nsMu.Unlock()
	for _, ns := range todo {
		if c.closing.Load() || c.Err() != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), c.cfg.CommandTimeout)
		err := ns.Refresh(ctx)
		cancel()
		if err != nil && !errors.Is(err, ErrNoNamespace) && !errors.Is(err, blockdev.ErrClosed) {
			c.log.Warn("nvme host: refreshing a namespace after an event failed", "subnqn", c.subNQN, "nsid", ns.nsid, "err", err)
		}
	}
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

// Identify returns the Identify Namespace data read at open or by the
// last Refresh that found the namespace.
func (ns *Namespace) Identify() nvmeof.IdentifyNamespace { return ns.state.Load().id }

// Info implements blockdev.Device. Size follows the namespace's resizes
// (see Refresh).
func (ns *Namespace) Info() blockdev.Info { return ns.state.Load().info }

// Removed tells whether the last Refresh found the namespace gone.
func (ns *Namespace) Removed() bool { return ns.state.Load().removed }

// Close implements blockdev.Device: it closes the controller if Open made
// it, else it only stops further submissions (requests in flight complete
// normally).
func (ns *Namespace) Close() error {
	ns.closed.Store(true)
	ns.c.nsMu.Lock()
	delete(ns.c.open, ns)
	ns.c.nsMu.Unlock()
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
	st := ns.state.Load()
	if st.failed != nil {
		return st.failed
	}
	if err := blockdev.Check(&st.info, r); err != nil {
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
