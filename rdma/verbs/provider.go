//go:build verbs

package verbs

/*
#include "cverbs.h"
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/rdisk/rdisk/rdma"
)

// Config selects the device.
type Config struct {
	// Device is a device name ("rxe0", "mlx5_0"), or an IP address of this
	// host whose RDMA device rdma_cm resolves (rdma_bind_addr), or "" for
	// the only RDMA device (an error when there are several).
	Device string
	// Logger receives connection and async events; nil discards them.
	Logger *slog.Logger
	// PollSpin makes a CQ's Wait keep polling that much longer before it
	// sleeps on the completion channel (default 0: it sleeps after a short
	// busy-poll). A wakeup through the channel costs an interrupt, the
	// netpoller and the scheduler (about a millisecond on each side of a
	// round trip under QEMU TCG), which a queue whose peer answers within
	// the spin never pays, for a core kept busy while it waits.
	PollSpin time.Duration
}

// Provider is one RDMA device reached through libibverbs and librdmacm.
// It implements rdma.Provider and is safe for concurrent use.
type Provider struct {
	dev      *device
	log      *slog.Logger
	pollSpin time.Duration // Config.PollSpin

	ch           *C.struct_rdma_event_channel
	wakeR, wakeW int
	loopDone     chan struct{}
	stop         chan struct{}

	mu     sync.Mutex
	ids    map[uintptr]*cmID
	nextID uintptr
	qps    map[*qp]struct{}
	frs    map[uint32]*fastReg
	closed bool
}

// device is the process-wide state of one librdmacm device context: the
// contexts come from rdma_get_devices, so every provider on a device shares
// them (and their async event queue).
type device struct {
	ctx   *C.struct_ibv_context
	name  string
	iwarp bool
	port  int
	// device limits
	maxRdAtom, maxInitRdAtom int
	maxSGE, maxQPWR, maxCQE  int
	odpImplicit              bool
	vendor                   uint32 // ibv_device_attr.vendor_id: rxeVendor, siwVendor, or a NIC's
	caps                     rdma.Caps

	mu  sync.RWMutex
	qps map[uint32]*qp
	log *slog.Logger
}

var (
	devOnce  sync.Once
	devErr   error
	devList  []*device
	devByCtx map[*C.struct_ibv_context]*device
)

func loadDevices() {
	var n C.int
	list, err := C.rdma_get_devices(&n)
	if list == nil {
		devErr = fmt.Errorf("verbs: rdma_get_devices: %v", err)
		return
	}
	// Never freed: librdmacm keeps the contexts open for the process.
	devByCtx = map[*C.struct_ibv_context]*device{}
	for _, ctx := range unsafe.Slice(list, int(n)) {
		d := &device{ctx: ctx, port: 1, qps: map[uint32]*qp{}, log: slog.New(slog.DiscardHandler)}
		d.name = C.GoString(C.ibv_get_device_name(ctx.device))
		d.iwarp = ctx.device.transport_type == C.IBV_TRANSPORT_IWARP
		var a C.struct_ibv_device_attr_ex
		if rc := C.ibv_query_device_ex(ctx, nil, &a); rc == 0 {
			d.maxRdAtom = int(a.orig_attr.max_qp_rd_atom)
			d.maxInitRdAtom = int(a.orig_attr.max_qp_init_rd_atom)
			d.maxSGE = int(a.orig_attr.max_sge)
			d.maxQPWR = int(a.orig_attr.max_qp_wr)
			d.maxCQE = int(a.orig_attr.max_cqe)
			d.vendor = uint32(a.orig_attr.vendor_id)
			d.odpImplicit = a.odp_caps.general_caps&C.IBV_ODP_SUPPORT_IMPLICIT != 0 &&
				a.odp_caps.per_transport_caps.rc_odp_caps&C.IBV_ODP_SUPPORT_SEND != 0
		} else {
			var b C.struct_ibv_device_attr
			if rc := C.ibv_query_device(ctx, &b); rc != 0 {
				devErr = fmt.Errorf("verbs: ibv_query_device %s: %v", d.name, syscall.Errno(rc))
				return
			}
			d.maxRdAtom, d.maxInitRdAtom = int(b.max_qp_rd_atom), int(b.max_qp_init_rd_atom)
			d.maxSGE, d.maxQPWR, d.maxCQE = int(b.max_sge), int(b.max_qp_wr), int(b.max_cqe)
			d.vendor = uint32(b.vendor_id)
		}
		d.caps = deviceCaps(d.iwarp, d.vendor)
		if C.rd_nonblock(ctx.async_fd) != 0 {
			devErr = fmt.Errorf("verbs: %s: cannot make the async event fd non-blocking", d.name)
			return
		}
		devList = append(devList, d)
		devByCtx[ctx] = d
		go d.asyncLoop()
	}
}

// asyncLoop takes the device's async events: QP errors fail the QP; port
// and device events are logged (a fatal device error fails every QP).
func (d *device) asyncLoop() {
	for {
		if C.rd_wait2(d.ctx.async_fd, -1, -1) < 0 {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		for {
			var typ, port C.int
			var qpn C.uint32_t
			if C.rd_get_async(d.ctx, &typ, &qpn, &port) != 0 {
				break
			}
			name := C.GoString(C.ibv_event_type_str(uint32(typ)))
			switch typ {
			case C.IBV_EVENT_QP_FATAL, C.IBV_EVENT_QP_REQ_ERR, C.IBV_EVENT_QP_ACCESS_ERR:
				d.mu.RLock()
				q := d.qps[uint32(qpn)]
				d.mu.RUnlock()
				if q != nil {
					q.fail(fmt.Errorf("verbs: %s: async event %s on QP %d", d.name, name, uint32(qpn)))
				}
			case C.IBV_EVENT_DEVICE_FATAL:
				d.mu.RLock()
				var all []*qp
				for _, q := range d.qps {
					all = append(all, q)
				}
				d.mu.RUnlock()
				for _, q := range all {
					q.fail(fmt.Errorf("verbs: %s: async event %s", d.name, name))
				}
				for _, q := range all {
					q.p.log.Error("verbs: device fatal error", "device", d.name)
					break
				}
			case C.IBV_EVENT_PORT_ERR, C.IBV_EVENT_PORT_ACTIVE, C.IBV_EVENT_GID_CHANGE, C.IBV_EVENT_LID_CHANGE:
				d.mu.RLock()
				for _, q := range d.qps {
					q.p.log.Warn("verbs: port event", "device", d.name, "port", int(port), "event", name)
					break
				}
				d.mu.RUnlock()
			}
		}
	}
}

func pickDevice(name string) (*device, error) {
	devOnce.Do(loadDevices)
	if devErr != nil {
		return nil, devErr
	}
	if len(devList) == 0 {
		return nil, errors.New("verbs: no RDMA device")
	}
	if name == "" {
		if len(devList) > 1 {
			var names []string
			for _, d := range devList {
				names = append(names, d.name)
			}
			return nil, fmt.Errorf("verbs: several RDMA devices (%s): set Config.Device to a name or an address", strings.Join(names, ", "))
		}
		return devList[0], nil
	}
	if ip, err := netip.ParseAddr(name); err == nil {
		ctx, err := bindVerbs(netip.AddrPortFrom(ip, 0))
		if err != nil {
			return nil, err
		}
		if d := devByCtx[ctx]; d != nil {
			return d, nil
		}
		return nil, fmt.Errorf("verbs: no RDMA device serves %s", name)
	}
	for _, d := range devList {
		if d.name == name {
			return d, nil
		}
	}
	return nil, fmt.Errorf("verbs: no RDMA device %q", name)
}

// bindVerbs binds a temporary synchronous cm_id to ap and returns the
// device context rdma_cm chose (nil for a wildcard address).
func bindVerbs(ap netip.AddrPort) (*C.struct_ibv_context, error) {
	var id *C.struct_rdma_cm_id
	if rc, err := C.rdma_create_id(nil, &id, nil, C.RDMA_PS_TCP); rc != 0 {
		return nil, fmt.Errorf("verbs: rdma_create_id: %v", err)
	}
	defer C.rdma_destroy_id(id)
	var ss C.struct_sockaddr_storage
	if err := toSockaddr(&ss, ap); err != nil {
		return nil, err
	}
	if rc, err := C.rdma_bind_addr(id, (*C.struct_sockaddr)(unsafe.Pointer(&ss))); rc != 0 {
		return nil, fmt.Errorf("verbs: rdma_bind_addr %s: %v", ap, err)
	}
	return C.rd_id_verbs(id), nil
}

// ServesAddr reports whether rdma_cm binds the IP of addr (host:port or a
// bare IP) to an RDMA device of this host.
func ServesAddr(addr string) bool {
	ap, err := parseAddr(addr)
	if err != nil || ap.Addr().IsUnspecified() {
		return false
	}
	ctx, err := bindVerbs(netip.AddrPortFrom(ap.Addr(), 0))
	return err == nil && ctx != nil
}

func parseAddr(addr string) (netip.AddrPort, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		host, port = addr, "0"
	}
	pn, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("verbs: bad port in %q", addr)
	}
	if host == "" {
		return netip.AddrPortFrom(netip.IPv4Unspecified(), uint16(pn)), nil
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		ips, lerr := net.LookupIP(host)
		if lerr != nil || len(ips) == 0 {
			return netip.AddrPort{}, fmt.Errorf("verbs: cannot resolve %q", host)
		}
		ip, _ = netip.AddrFromSlice(ips[0])
	}
	ip = ip.Unmap()
	if testLoopback.IsValid() && ip.IsLoopback() {
		ip = testLoopback
	}
	return netip.AddrPortFrom(ip, uint16(pn)), nil
}

// testLoopback, when set by the package's tests, replaces loopback
// addresses: rdma_cm cannot bind 127.0.0.1 to an RDMA device, and the
// conformance suite listens there.
var testLoopback netip.Addr

func toSockaddr(ss *C.struct_sockaddr_storage, ap netip.AddrPort) error {
	ip := ap.Addr()
	var b []byte
	if ip.Is4() {
		a := ip.As4()
		b = a[:]
	} else {
		a := ip.As16()
		b = a[:]
	}
	if C.rd_sockaddr(ss, (*C.uint8_t)(unsafe.Pointer(&b[0])), C.int(len(b)), C.int(ap.Port())) < 0 {
		return fmt.Errorf("verbs: bad address %s", ap)
	}
	return nil
}

// New opens the device cfg names (see Config.Device).
func New(cfg Config) (*Provider, error) {
	d, err := pickDevice(cfg.Device)
	if err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.PollSpin < 0 {
		return nil, fmt.Errorf("verbs: poll spin %v is negative", cfg.PollSpin)
	}
	p := &Provider{dev: d, log: log.With("provider", "verbs:"+d.name), pollSpin: cfg.PollSpin, ids: map[uintptr]*cmID{}, qps: map[*qp]struct{}{},
		frs: map[uint32]*fastReg{}, loopDone: make(chan struct{}), stop: make(chan struct{})}
	ch, err := C.rdma_create_event_channel()
	if ch == nil {
		return nil, fmt.Errorf("verbs: rdma_create_event_channel: %v", err)
	}
	p.ch = ch
	if C.rd_nonblock(ch.fd) != 0 {
		C.rdma_destroy_event_channel(ch)
		return nil, errors.New("verbs: cannot make the CM event channel non-blocking")
	}
	var fds [2]int
	if err := syscall.Pipe2(fds[:], syscall.O_CLOEXEC|syscall.O_NONBLOCK); err != nil {
		C.rdma_destroy_event_channel(ch)
		return nil, fmt.Errorf("verbs: pipe: %v", err)
	}
	p.wakeR, p.wakeW = fds[0], fds[1]
	go p.cmLoop()
	go p.watchdog()
	return p, nil
}

// Name implements rdma.Provider.
func (p *Provider) Name() string { return "verbs:" + p.dev.name }

// Close implements rdma.Provider.
func (p *Provider) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	close(p.stop)
	syscall.Write(p.wakeW, []byte{1})
	<-p.loopDone
	p.mu.Lock()
	ids := p.ids
	p.ids = map[uintptr]*cmID{}
	p.mu.Unlock()
	for _, c := range ids {
		c.destroy()
	}
	C.rdma_destroy_event_channel(p.ch)
	syscall.Close(p.wakeR)
	syscall.Close(p.wakeW)
	return nil
}

// cmID is one rdma_cm_id on the provider's event channel; its events go to
// evs (never blocking the event loop: a full queue drops the event, which
// is logged).
type cmID struct {
	p    *Provider
	id   *C.struct_rdma_cm_id
	h    uintptr
	evs  chan cmEvent
	once sync.Once
}

type cmEvent struct {
	typ, status int
	priv        []byte
	rr, id      int
	req         *C.struct_rdma_cm_id // CONNECT_REQUEST: the new id
}

func (p *Provider) newCMID() (*cmID, error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, rdma.ErrClosed
	}
	p.nextID++
	c := &cmID{p: p, h: p.nextID, evs: make(chan cmEvent, 16)}
	p.ids[c.h] = c
	p.mu.Unlock()
	if rc, err := C.rdma_create_id(p.ch, &c.id, nil, C.RDMA_PS_TCP); rc != 0 {
		p.mu.Lock()
		delete(p.ids, c.h)
		p.mu.Unlock()
		return nil, fmt.Errorf("verbs: rdma_create_id: %v", err)
	}
	C.rd_set_context(c.id, C.uintptr_t(c.h))
	return c, nil
}

// adopt registers an id the CM created for a connection request.
func (p *Provider) adopt(id *C.struct_rdma_cm_id) *cmID {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.nextID++
	c := &cmID{p: p, id: id, h: p.nextID, evs: make(chan cmEvent, 16)}
	p.ids[c.h] = c
	C.rd_set_context(id, C.uintptr_t(c.h))
	return c
}

func (c *cmID) destroy() {
	c.once.Do(func() {
		c.p.mu.Lock()
		delete(c.p.ids, c.h)
		c.p.mu.Unlock()
		C.rd_set_qp(c.id, nil)
		C.rdma_destroy_id(c.id)
	})
}

func (c *cmID) addr(peer bool) net.Addr {
	var ip [16]byte
	var port C.int
	pv := C.int(0)
	if peer {
		pv = 1
	}
	fam := C.rd_addr(c.id, pv, (*C.uint8_t)(unsafe.Pointer(&ip[0])), &port)
	if fam < 0 {
		return &net.TCPAddr{}
	}
	a := netip.AddrFrom16(ip).Unmap()
	return net.TCPAddrFromAddrPort(netip.AddrPortFrom(a, uint16(port)))
}

// wait waits for the next event on c.
func (c *cmID) wait(ctx context.Context) (cmEvent, error) {
	select {
	case ev := <-c.evs:
		return ev, nil
	case <-ctx.Done():
		return cmEvent{}, ctx.Err()
	case <-c.p.stop:
		return cmEvent{}, rdma.ErrClosed
	}
}

func (p *Provider) cmLoop() {
	defer close(p.loopDone)
	var ev C.struct_rd_event
	for {
		r := C.rd_wait2(p.ch.fd, C.int(p.wakeR), -1)
		if r < 0 {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if r&2 != 0 {
			return
		}
		for C.rd_get_event(p.ch, &ev) == 0 {
			p.dispatch(&ev)
		}
	}
}

func (p *Provider) dispatch(ev *C.struct_rd_event) {
	e := cmEvent{typ: int(ev._type), status: int(ev.status), rr: int(ev.responder_resources), id: int(ev.initiator_depth)}
	if ev.pd_len > 0 {
		e.priv = C.GoBytes(unsafe.Pointer(&ev.pd[0]), ev.pd_len)
	}
	h := uintptr(ev.ctx)
	if e.typ == C.RDMA_CM_EVENT_CONNECT_REQUEST {
		h = uintptr(ev.listen_ctx)
		e.req = ev.id
	}
	p.mu.Lock()
	c := p.ids[h]
	p.mu.Unlock()
	if c == nil {
		if e.req != nil {
			C.rdma_reject(e.req, nil, 0)
			C.rdma_destroy_id(e.req)
		}
		return
	}
	if e.req != nil {
		// Registered here, before the next event can name it.
		e.req = p.adopt(e.req).id
	}
	select {
	case c.evs <- e:
	default:
		p.log.Warn("verbs: CM event queue full, event dropped", "event", eventName(e.typ))
		if e.req != nil {
			C.rdma_reject(e.req, nil, 0)
			p.idOf(e.req).destroy()
		}
	}
}

func (p *Provider) idOf(id *C.struct_rdma_cm_id) *cmID {
	h := uintptr(unsafe.Pointer(id.context))
	p.mu.Lock()
	defer p.mu.Unlock()
	if c := p.ids[h]; c != nil {
		return c
	}
	return &cmID{p: p, id: id}
}

func eventName(t int) string { return C.GoString(C.rdma_event_str(uint32(t))) }

// cmError describes a failed CM step.
func cmError(step string, e cmEvent) error {
	return fmt.Errorf("verbs: %s: %s (status %d%s)", step, eventName(e.typ), e.status, statusText(e.status))
}

func statusText(st int) string {
	if st < 0 {
		return ", " + syscall.Errno(-st).Error()
	}
	return ""
}

// watchdog notices QPs the device moved to the error state without an
// event anyone sees (a requester's retries exhausted on a CQ nobody
// polls): it queries the state of the provider's connected QPs.
func (p *Provider) watchdog() {
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	var qs []*qp
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
		}
		qs = qs[:0]
		p.mu.Lock()
		for q := range p.qps {
			qs = append(qs, q)
		}
		p.mu.Unlock()
		for _, q := range qs {
			q.checkState()
		}
	}
}

// AllocPD implements rdma.Provider.
func (p *Provider) AllocPD() (rdma.PD, error) {
	pd, err := C.ibv_alloc_pd(p.dev.ctx)
	if pd == nil {
		return nil, fmt.Errorf("verbs: ibv_alloc_pd: %v", err)
	}
	return &protDomain{p: p, pd: pd}, nil
}
