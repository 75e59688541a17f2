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
	"net"
	"sync"
	"unsafe"

	"github.com/rdisk/rdisk/rdma"
)

// Listen implements rdma.Provider: rdma_bind_addr + rdma_listen on addr.
// A specific address must resolve to this provider's device.
func (p *Provider) Listen(ctx context.Context, addr string) (rdma.Listener, error) {
	ap, err := parseAddr(addr)
	if err != nil {
		return nil, err
	}
	c, err := p.newCMID()
	if err != nil {
		return nil, err
	}
	var ss C.struct_sockaddr_storage
	if err := toSockaddr(&ss, ap); err != nil {
		c.destroy()
		return nil, err
	}
	if rc, err := C.rdma_bind_addr(c.id, (*C.struct_sockaddr)(unsafe.Pointer(&ss))); rc != 0 {
		c.destroy()
		return nil, fmt.Errorf("verbs: rdma_bind_addr %s: %v", ap, err)
	}
	if v := C.rd_id_verbs(c.id); v != nil && v != p.dev.ctx {
		c.destroy()
		return nil, fmt.Errorf("verbs: %s belongs to RDMA device %s, not %s", ap, C.GoString(C.ibv_get_device_name(v.device)), p.dev.name)
	}
	if rc, err := C.rdma_listen(c.id, 128); rc != 0 {
		c.destroy()
		return nil, fmt.Errorf("verbs: rdma_listen %s: %v", ap, err)
	}
	l := &listener{p: p, c: c, done: make(chan struct{}), addr: c.addr(false)}
	p.log.Debug("verbs: listening", "addr", l.addr)
	return l, nil
}

type listener struct {
	p    *Provider
	c    *cmID
	addr net.Addr
	once sync.Once
	done chan struct{}
}

func (l *listener) Addr() net.Addr { return l.addr }

func (l *listener) Accept(ctx context.Context) (rdma.ConnRequest, error) {
	for {
		select {
		case <-l.done:
			return nil, rdma.ErrClosed
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-l.p.stop:
			return nil, rdma.ErrClosed
		case e := <-l.c.evs:
			if e.typ != C.RDMA_CM_EVENT_CONNECT_REQUEST || e.req == nil {
				l.p.log.Warn("verbs: listener event", "event", eventName(e.typ), "status", e.status)
				continue
			}
			c := l.p.idOf(e.req)
			// rdma_cm hands the passive side the initiator's values
			// swapped, as the ones to answer with (cm.c
			// cm_format_req_event, cma.c cma_iw_handler): the event's
			// responder_resources is the initiator's ORD, its
			// initiator_depth the initiator's IRD.
			r := &connReq{p: l.p, c: c, priv: e.priv, rr: e.id, id: e.rr, laddr: c.addr(false), raddr: c.addr(true)}
			if v := C.rd_id_verbs(e.req); v != l.p.dev.ctx {
				l.p.log.Warn("verbs: connection request on another RDMA device rejected", "from", r.raddr)
				r.Reject(nil)
				continue
			}
			return r, nil
		}
	}
}

func (l *listener) Close() error {
	l.once.Do(func() {
		close(l.done)
		l.c.destroy()
		for {
			select {
			case e := <-l.c.evs:
				if e.req != nil {
					C.rdma_reject(e.req, nil, 0)
					l.p.idOf(e.req).destroy()
				}
				continue
			default:
			}
			break
		}
	})
	return nil
}

type connReq struct {
	p        *Provider
	c        *cmID
	priv     []byte
	rr, id   int // the initiator's IRD and ORD
	laddr    net.Addr
	raddr    net.Addr
	answered bool
	mu       sync.Mutex
}

func (r *connReq) PrivateData() []byte     { return r.priv }
func (r *connReq) ResponderResources() int { return r.rr }
func (r *connReq) InitiatorDepth() int     { return r.id }
func (r *connReq) LocalAddr() net.Addr     { return r.laddr }
func (r *connReq) RemoteAddr() net.Addr    { return r.raddr }

func (r *connReq) answer() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.answered {
		return errors.New("verbs: connection request already answered")
	}
	r.answered = true
	return nil
}

// Reject implements rdma.ConnRequest (rdma_reject with private data).
func (r *connReq) Reject(privateData []byte) error {
	if err := r.p.checkPD(len(privateData), pdReject); err != nil {
		return err
	}
	if err := r.answer(); err != nil {
		return err
	}
	defer r.c.destroy()
	var ptr unsafe.Pointer
	if len(privateData) > 0 {
		ptr = C.CBytes(privateData)
		defer C.free(ptr)
	}
	if rc, err := C.rdma_reject(r.c.id, ptr, C.uint8_t(len(privateData))); rc != 0 {
		return fmt.Errorf("verbs: rdma_reject: %v", err)
	}
	return nil
}

// checkPD refuses private data over the device's limit for kind (the
// kernel would refuse it with EINVAL, or worse, see deviceCaps).
func (p *Provider) checkPD(n, kind int) error {
	if max := p.pdLimit(kind); n > max {
		what := [...]string{"connect request", "accept reply", "reject"}[kind]
		return fmt.Errorf("verbs: %d bytes of private data in a %s, more than the %d that %s carries", n, what, max, p.dev.name)
	}
	return nil
}

func capDefault(v, max int) int {
	if v <= 0 || v > max {
		return max
	}
	return v
}

// connParam fills an rdma_conn_param; the private data is copied into C
// memory the caller frees.
func (p *Provider) connParam(cp *C.struct_rdma_conn_param, prm rdma.ConnParam, q *qp, kind int) (unsafe.Pointer, error) {
	if err := p.checkPD(len(prm.PrivateData), kind); err != nil {
		return nil, err
	}
	*cp = C.struct_rdma_conn_param{}
	var ptr unsafe.Pointer
	if len(prm.PrivateData) > 0 {
		ptr = C.CBytes(prm.PrivateData)
		cp.private_data = ptr
		cp.private_data_len = C.uint8_t(len(prm.PrivateData))
	}
	cp.responder_resources = C.uint8_t(min(capDefault(prm.ResponderResources, p.dev.maxRdAtom), 255))
	cp.initiator_depth = C.uint8_t(min(capDefault(prm.InitiatorDepth, p.dev.maxInitRdAtom), 255))
	cp.flow_control = 1
	cp.retry_count = 7
	// No RNR retries: a Send without a posted receive fails the
	// connection, as iWARP does (rdma.QP's contract).
	cp.rnr_retry_count = 0
	cp.qp_num = C.uint32_t(q.num)
	return ptr, nil
}

// Accept implements rdma.ConnRequest: the QP is bound to the request's
// cm_id and rdma_accept answers; it returns once the connection is
// established.
func (r *connReq) Accept(ctx context.Context, qpi rdma.QP, prm rdma.ConnParam) error {
	q, ok := qpi.(*qp)
	if !ok || q.p != r.p {
		return errors.New("verbs: Accept needs a QP of the same provider")
	}
	if err := r.p.checkPD(len(prm.PrivateData), pdAccept); err != nil {
		return err
	}
	if err := r.answer(); err != nil {
		return err
	}
	// Relaxed negotiation: never more than the initiator offers.
	if prm.ResponderResources <= 0 || prm.ResponderResources > r.id {
		prm.ResponderResources = r.id
	}
	if prm.InitiatorDepth <= 0 || prm.InitiatorDepth > r.rr {
		prm.InitiatorDepth = r.rr
	}
	if err := q.startConnect(r.c); err != nil {
		C.rdma_reject(r.c.id, nil, 0)
		r.c.destroy()
		return err
	}
	var cp C.struct_rdma_conn_param
	ptr, err := r.p.connParam(&cp, prm, q, pdAccept)
	if ptr != nil {
		defer C.free(ptr)
	}
	if err != nil {
		q.connectFailed(err)
		return err
	}
	if prm.ResponderResources == 0 {
		cp.responder_resources = 0
	}
	if prm.InitiatorDepth == 0 {
		cp.initiator_depth = 0
	}
	C.rd_set_qp(r.c.id, q.qp)
	if rc, err := C.rdma_accept(r.c.id, &cp); rc != 0 {
		err = fmt.Errorf("verbs: rdma_accept: %v", err)
		q.connectFailed(err)
		return err
	}
	for {
		e, err := r.c.wait(ctx)
		if err != nil {
			q.connectFailed(err)
			return err
		}
		switch e.typ {
		case C.RDMA_CM_EVENT_ESTABLISHED:
			q.established(r.laddr, r.raddr)
			return nil
		case C.RDMA_CM_EVENT_CONNECT_ERROR, C.RDMA_CM_EVENT_UNREACHABLE, C.RDMA_CM_EVENT_REJECTED,
			C.RDMA_CM_EVENT_DISCONNECTED, C.RDMA_CM_EVENT_DEVICE_REMOVAL:
			err := cmError("accept", e)
			q.connectFailed(err)
			return err
		}
	}
}
