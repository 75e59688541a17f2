package iwarp

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/rdisk/rdisk/rdma"
)

// Config tunes the provider. The zero value gives siw-compatible defaults.
type Config struct {
	// Logger receives connection events; nil discards them.
	Logger *slog.Logger
	// CRC asks peers for MPA CRC32c on every FPDU. Off by default, like
	// siw; CRC is still used when the peer asks for it.
	CRC bool
	// MaxFPDUPayload bounds the payload bytes of one outgoing FPDU
	// (default 65472, so the ULPDU length fits the 16-bit field).
	MaxFPDUPayload int
	// HandshakeTimeout bounds the MPA request/reply exchange (default 10 s
	// for the initiator and 5 s for the responder, as siw).
	HandshakeTimeout time.Duration
	// MaxIRD and MaxORD cap the RDMA Reads in flight per QP (default 128).
	MaxIRD, MaxORD int
}

const (
	defaultMaxFPDUPayload = 65472
	defaultMaxIRDORD      = 128
	maxSTags              = 1 << 24
)

// Provider is the pure-Go iWARP device. It is safe for concurrent use.
type Provider struct {
	cfg Config
	log *slog.Logger

	stags stagTable
	st    provStats

	mu     sync.Mutex
	qpNum  uint32
	closed bool
	nextPD uint32
}

// New returns a provider.
func New(cfg Config) (*Provider, error) {
	if cfg.MaxFPDUPayload <= 0 {
		cfg.MaxFPDUPayload = defaultMaxFPDUPayload
	}
	if cfg.MaxFPDUPayload > 65535-untaggedHdrLen {
		return nil, fmt.Errorf("iwarp: MaxFPDUPayload %d exceeds the MPA ULPDU limit", cfg.MaxFPDUPayload)
	}
	if cfg.MaxIRD <= 0 {
		cfg.MaxIRD = defaultMaxIRDORD
	}
	if cfg.MaxORD <= 0 {
		cfg.MaxORD = defaultMaxIRDORD
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p := &Provider{cfg: cfg, log: log}
	p.stags.init()
	return p, nil
}

// Name implements rdma.Provider.
func (p *Provider) Name() string { return "iwarp" }

// Close implements rdma.Provider.
func (p *Provider) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	return nil
}

// AllocPD implements rdma.Provider.
func (p *Provider) AllocPD() (rdma.PD, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, rdma.ErrClosed
	}
	p.nextPD++
	return &pd{p: p, id: p.nextPD}, nil
}

func (p *Provider) newQPNum() uint32 {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.qpNum++
	return p.qpNum
}

// stagTable maps the 24-bit STag index to regions. Index 0 is never used so
// that STag 0 is always invalid.
type stagTable struct {
	mu      sync.Mutex
	entries atomic.Pointer[[]*region]
	free    []uint32
	next    uint32
}

func (t *stagTable) init() {
	s := make([]*region, 64)
	t.entries.Store(&s)
	t.next = 1
}

// add assigns an index to r.
func (t *stagTable) add(r *region) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	var idx uint32
	if n := len(t.free); n > 0 {
		idx = t.free[n-1]
		t.free = t.free[:n-1]
	} else {
		if t.next >= maxSTags {
			return fmt.Errorf("iwarp: out of STags")
		}
		idx = t.next
		t.next++
	}
	cur := *t.entries.Load()
	if int(idx) >= len(cur) {
		grown := make([]*region, 2*int(idx))
		copy(grown, cur)
		t.entries.Store(&grown)
		cur = grown
	}
	// Entries are written only under mu; readers see either nil or r.
	atomicStoreRegion(&cur[idx], r)
	r.index = idx
	return nil
}

func (t *stagTable) remove(idx uint32) {
	t.mu.Lock()
	defer t.mu.Unlock()
	cur := *t.entries.Load()
	atomicStoreRegion(&cur[idx], nil)
	t.free = append(t.free, idx)
}

// lookup returns the region of an STag's index, or nil.
func (t *stagTable) lookup(stag uint32) *region {
	idx := stag >> 8
	cur := *t.entries.Load()
	if idx == 0 || int(idx) >= len(cur) {
		return nil
	}
	return atomicLoadRegion(&cur[idx])
}

func atomicStoreRegion(p **region, r *region) {
	atomic.StorePointer((*unsafe.Pointer)(unsafe.Pointer(p)), unsafe.Pointer(r))
}

func atomicLoadRegion(p **region) *region {
	return (*region)(atomic.LoadPointer((*unsafe.Pointer)(unsafe.Pointer(p))))
}

// region is a registered memory region or a fast-registration key. Its
// binding (memory, bounds, rights, key) is guarded by mu so that a
// concurrent invalidation never lets a placement see a half-updated view.
type region struct {
	p     *Provider
	pd    *pd
	index uint32
	fast  bool // fast-registration key (FastRegMR)
	// implicit: an MR over all memory (ImplicitPD, or with access
	// AccessLocalWrite ImplicitWritePD); SGEs naming it carry their memory
	// in SGE.Buf. It has no memory of its own and never any remote right.
	implicit bool

	mu     sync.Mutex
	key    uint8
	valid  bool
	mem    []byte
	va     uint64
	access rdma.Access
	maxLen int
}

func (r *region) stag() uint32 { return r.index<<8 | uint32(r.key) }

// resolve checks an access of n bytes at address va with rights need by
// the holder of stag and returns the memory, or a protection error code.
func (r *region) resolve(stag uint32, pdOwner *pd, va uint64, n int, need rdma.Access) ([]byte, uint8) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.valid || uint8(stag) != r.key {
		return nil, rdmapECodeInvalidSTag
	}
	if r.pd != pdOwner {
		return nil, rdmapECodeSTagNotAssoc
	}
	if r.implicit || r.access&need != need {
		return nil, rdmapECodeAccessRights
	}
	if n < 0 || va < r.va || va-r.va > uint64(len(r.mem)) || uint64(n) > uint64(len(r.mem))-(va-r.va) {
		if va+uint64(n) < va {
			return nil, rdmapECodeTOWrap
		}
		return nil, rdmapECodeBaseBounds
	}
	off := va - r.va
	return r.mem[off : off+uint64(n) : off+uint64(n)], 0
}

type pd struct {
	p  *Provider
	id uint32
}

func (d *pd) RegisterMemory(buf []byte, access rdma.Access) (rdma.MR, error) {
	if len(buf) == 0 {
		return nil, fmt.Errorf("iwarp: registering memory: empty buffer")
	}
	r := &region{p: d.p, pd: d, key: 0, valid: true, mem: buf, va: uint64(uintptr(unsafe.Pointer(&buf[0]))), access: access}
	if err := d.p.stags.add(r); err != nil {
		return nil, fmt.Errorf("iwarp: registering memory: %w", err)
	}
	return &mr{r: r}, nil
}

// RegisterImplicit implements rdma.ImplicitPD. The region has no memory
// and no rights of its own, so any remote access to its STag fails the
// rights check.
func (d *pd) RegisterImplicit() (rdma.MR, error) {
	r := &region{p: d.p, pd: d, implicit: true, valid: true}
	if err := d.p.stags.add(r); err != nil {
		return nil, fmt.Errorf("iwarp: registering the implicit MR: %w", err)
	}
	return &mr{r: r}, nil
}

// RegisterImplicitWrite implements rdma.ImplicitWritePD: the implicit MR
// that may also be an RDMA Read sink (lookupSGE). Its only right is
// local write, so remote accesses to its STag fail the rights check as
// the read-only one's do.
func (d *pd) RegisterImplicitWrite() (rdma.MR, error) {
	r := &region{p: d.p, pd: d, implicit: true, valid: true, access: rdma.AccessLocalWrite}
	if err := d.p.stags.add(r); err != nil {
		return nil, fmt.Errorf("iwarp: registering the implicit write MR: %w", err)
	}
	return &mr{r: r}, nil
}

func (d *pd) AllocFastRegMR(maxLen int) (rdma.FastRegMR, error) {
	if maxLen <= 0 {
		return nil, fmt.Errorf("iwarp: allocating fast-registration key: bad length %d", maxLen)
	}
	r := &region{p: d.p, pd: d, fast: true, maxLen: maxLen}
	if err := d.p.stags.add(r); err != nil {
		return nil, fmt.Errorf("iwarp: allocating fast-registration key: %w", err)
	}
	return &fastMR{r: r}, nil
}

func (d *pd) CreateQP(cfg rdma.QPConfig) (rdma.QP, error) {
	return newQP(d, cfg)
}

func (d *pd) Close() error { return nil }

// mr implements rdma.MR.
type mr struct {
	r *region
}

func (m *mr) LKey() uint32        { return m.r.stag() }
func (m *mr) RKey() uint32        { return m.r.stag() }
func (m *mr) VA() uint64          { return m.r.va }
func (m *mr) Bytes() []byte       { return m.r.mem }
func (m *mr) Access() rdma.Access { return m.r.access }
func (m *mr) Deregister() error {
	m.r.mu.Lock()
	was := m.r.valid
	m.r.valid = false
	m.r.mu.Unlock()
	if was {
		m.r.p.stags.remove(m.r.index)
	}
	return nil
}

// fastMR implements rdma.FastRegMR.
type fastMR struct {
	r      *region
	closed bool
}

func (f *fastMR) Map(m rdma.MR, off, length int, access rdma.Access) (uint32, uint64, error) {
	base, ok := m.(*mr)
	if !ok || base.r.implicit {
		return 0, 0, fmt.Errorf("iwarp: fast registration over a foreign or implicit MR")
	}
	mem := base.r.mem
	if off < 0 || length <= 0 || off > len(mem) || length > len(mem)-off {
		return 0, 0, fmt.Errorf("iwarp: fast registration of [%d,+%d) outside the %d-byte region", off, length, len(mem))
	}
	if length > f.r.maxLen {
		return 0, 0, fmt.Errorf("iwarp: fast registration of %d bytes exceeds the key's %d", length, f.r.maxLen)
	}
	if base.r.pd != f.r.pd {
		return 0, 0, fmt.Errorf("iwarp: fast registration across protection domains")
	}
	r := f.r
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.valid {
		return 0, 0, fmt.Errorf("iwarp: fast registration of a key still valid (invalidate it first)")
	}
	r.key++
	r.valid = true
	r.mem = mem[off : off+length : off+length]
	r.va = base.r.va + uint64(off)
	r.access = access
	return r.stag(), r.va, nil
}

func (f *fastMR) Invalidate() error {
	f.r.mu.Lock()
	f.r.valid = false
	f.r.mu.Unlock()
	return nil
}

func (f *fastMR) RKey() uint32 {
	f.r.mu.Lock()
	defer f.r.mu.Unlock()
	return f.r.stag()
}

func (f *fastMR) Valid() bool {
	f.r.mu.Lock()
	defer f.r.mu.Unlock()
	return f.r.valid
}

func (f *fastMR) Close() error {
	if f.closed {
		return nil
	}
	f.closed = true
	f.r.mu.Lock()
	f.r.valid = false
	f.r.mem = nil
	f.r.mu.Unlock()
	f.r.p.stags.remove(f.r.index)
	return nil
}

// invalidate invalidates stag if it names a fast-registration key of pd.
// It returns false when the STag is not one that can be invalidated.
func (p *Provider) invalidate(stag uint32, owner *pd) bool {
	r := p.stags.lookup(stag)
	if r == nil || !r.fast {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pd != owner || uint8(stag) != r.key || !r.valid {
		return false
	}
	r.valid = false
	return true
}

// lookupSGE resolves a local SGE to memory; recv tells it is a receive
// buffer (which an implicit MR never is).
func lookupSGE(owner *pd, s *rdma.SGE, need rdma.Access, recv bool) ([]byte, error) {
	if s.MR == nil {
		return nil, rdma.ErrBadSGE
	}
	m, ok := s.MR.(*mr)
	if !ok {
		return nil, rdma.ErrBadSGE
	}
	if m.r.implicit {
		// Local gather, and with local write (ImplicitWritePD) an RDMA
		// Read sink; never a receive buffer.
		if m.r.pd != owner || recv || need&rdma.AccessLocalWrite != 0 && m.r.access&rdma.AccessLocalWrite == 0 {
			return nil, rdma.ErrBadSGE
		}
		return s.Buf[:len(s.Buf):len(s.Buf)], nil
	}
	if s.Buf != nil {
		return nil, rdma.ErrBadSGE
	}
	mem := m.r.mem
	if m.r.pd != owner || s.Offset < 0 || s.Length < 0 || s.Offset > len(mem) || s.Length > len(mem)-s.Offset {
		return nil, rdma.ErrBadSGE
	}
	if need&rdma.AccessLocalWrite != 0 && m.r.access&rdma.AccessLocalWrite == 0 {
		return nil, rdma.ErrBadSGE
	}
	return mem[s.Offset : s.Offset+s.Length : s.Offset+s.Length], nil
}

// Listen implements rdma.Provider.
func (p *Provider) Listen(ctx context.Context, addr string) (rdma.Listener, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("iwarp: listening on %s: %w", addr, err)
	}
	return newListener(p, ln), nil
}

// ConnRequestPrefix implements rdma.StreamProvider: the MPA key.
func (p *Provider) ConnRequestPrefix() int { return len(mpaKeyReq) }

// IsConnRequest implements rdma.StreamProvider: an MPA request frame
// starts with its key (RFC 5044 section 7.1).
func (p *Provider) IsConnRequest(first []byte) bool { return string(first) == mpaKeyReq }

// ServeConn runs the responder side of MPA on an already accepted TCP
// connection whose bytes may have been peeked by a protocol demultiplexer
// (rest is what the caller already read). The request is returned like one
// from a Listener.
func (p *Provider) ServeConn(ctx context.Context, c net.Conn, rest []byte) (rdma.ConnRequest, error) {
	return p.readRequest(ctx, c, rest)
}
