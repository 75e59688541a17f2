package iwarp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/rdisk/rdisk/rdma"
)

const (
	initiatorMPATimeout = 10 * time.Second // siw MPAREQ_TIMEOUT
	responderMPATimeout = 5 * time.Second  // siw MPAREP_TIMEOUT
)

// listener accepts TCP connections and turns each into a connection request
// once its MPA request frame has arrived.
type listener struct {
	p    *Provider
	ln   net.Listener
	reqs chan *connReq

	once   sync.Once
	closed chan struct{}
	wg     sync.WaitGroup
}

func newListener(p *Provider, ln net.Listener) *listener {
	l := &listener{p: p, ln: ln, reqs: make(chan *connReq), closed: make(chan struct{})}
	l.wg.Add(1)
	go l.loop()
	return l
}

func (l *listener) loop() {
	defer l.wg.Done()
	for {
		c, err := l.ln.Accept()
		if err != nil {
			select {
			case <-l.closed:
				return
			default:
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			l.p.log.Warn("iwarp: accept failed; listener stops", "addr", l.ln.Addr(), "err", err)
			return
		}
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), l.timeout())
			req, err := l.p.readRequest(ctx, c, nil)
			cancel()
			if err != nil {
				l.p.log.Debug("iwarp: dropping connection before MPA request", "peer", c.RemoteAddr(), "err", err)
				c.Close()
				return
			}
			select {
			case l.reqs <- req:
			case <-l.closed:
				req.Reject(nil)
			}
		}()
	}
}

func (l *listener) timeout() time.Duration {
	if l.p.cfg.HandshakeTimeout > 0 {
		return l.p.cfg.HandshakeTimeout
	}
	return responderMPATimeout
}

func (l *listener) Accept(ctx context.Context) (rdma.ConnRequest, error) {
	select {
	case r := <-l.reqs:
		return r, nil
	case <-l.closed:
		return nil, rdma.ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (l *listener) Addr() net.Addr { return l.ln.Addr() }

func (l *listener) Close() error {
	var err error
	l.once.Do(func() {
		close(l.closed)
		err = l.ln.Close()
	})
	l.wg.Wait()
	return err
}

// readRequest reads an MPA request from c (rest holds bytes a demultiplexer
// already consumed).
func (p *Provider) readRequest(ctx context.Context, c net.Conn, rest []byte) (*connReq, error) {
	setNoDelay(c)
	stop := deadlineFromContext(ctx, c)
	defer stop()
	f, err := readMPA(c, rest, false)
	if err != nil {
		if f.Reply || errors.Is(err, errMPAKey) || errors.Is(err, errMPARev) {
			// RFC 5044 §7.1: answer a malformed request with a reject.
			writeReject(c, f.Rev)
		}
		if !isProbe(err, rest) {
			p.st.reject(setupFailure(ctx, err))
		}
		return nil, fmt.Errorf("iwarp: reading MPA request: %w", err)
	}
	if f.Markers {
		writeReject(c, f.Rev)
		p.st.reject(rejectInvalid)
		return nil, fmt.Errorf("iwarp: peer asked for MPA markers, which rdisk does not support")
	}
	return &connReq{p: p, c: c, f: f}, nil
}

func writeReject(c net.Conn, rev uint8) {
	if rev == 0 || rev > 2 {
		rev = 1
	}
	rf := mpaFrame{Reply: true, Reject: true, Rev: rev}
	c.SetWriteDeadline(time.Now().Add(time.Second))
	c.Write(appendMPA(nil, &rf))
}

// readMPA reads one MPA frame; rest are bytes of it already read.
func readMPA(c net.Conn, rest []byte, reply bool) (mpaFrame, error) {
	var hdr [mpaHeaderLen]byte
	n := copy(hdr[:], rest)
	rest = rest[n:]
	if _, err := io.ReadFull(c, hdr[n:]); err != nil {
		return mpaFrame{}, err
	}
	f, pdLen, err := parseMPAHeader(hdr[:], reply)
	if err != nil {
		return f, err
	}
	pd := make([]byte, pdLen)
	n = copy(pd, rest)
	if _, err := io.ReadFull(c, pd[n:]); err != nil {
		return f, err
	}
	if err := f.finishMPA(pd); err != nil {
		return f, err
	}
	return f, nil
}

func setNoDelay(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
}

// deadlineFromContext applies ctx's deadline to c and aborts blocking I/O on
// cancellation; the returned func clears both.
func deadlineFromContext(ctx context.Context, c net.Conn) func() {
	if d, ok := ctx.Deadline(); ok {
		c.SetDeadline(d)
	}
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	return func() {
		stop()
		c.SetDeadline(time.Time{})
	}
}

// connReq implements rdma.ConnRequest.
type connReq struct {
	p    *Provider
	c    net.Conn
	f    mpaFrame
	once sync.Once
}

func (r *connReq) PrivateData() []byte     { return r.f.PrivateData }
func (r *connReq) ResponderResources() int { return r.f.IRD }
func (r *connReq) InitiatorDepth() int     { return r.f.ORD }
func (r *connReq) LocalAddr() net.Addr     { return r.c.LocalAddr() }
func (r *connReq) RemoteAddr() net.Addr    { return r.c.RemoteAddr() }

func (r *connReq) Reject(privateData []byte) error {
	var err error = rdma.ErrClosed
	r.once.Do(func() {
		err = nil
		r.p.st.reject(rejectLocal)
		if len(privateData) > rdma.MaxPrivateData {
			privateData = privateData[:rdma.MaxPrivateData]
		}
		rf := mpaFrame{Reply: true, Reject: true, Rev: r.f.Rev, Enhanced: r.f.Enhanced, PrivateData: privateData}
		if rf.Rev == 0 {
			rf.Rev = 1
		}
		r.c.SetWriteDeadline(time.Now().Add(time.Second))
		if _, werr := r.c.Write(appendMPA(nil, &rf)); werr != nil {
			err = fmt.Errorf("iwarp: sending MPA reject: %w", werr)
		}
		r.c.Close()
	})
	return err
}

func (r *connReq) Accept(ctx context.Context, q rdma.QP, prm rdma.ConnParam) error {
	qp, ok := q.(*qp)
	if !ok || qp.pd.p != r.p {
		r.Reject(nil)
		return fmt.Errorf("iwarp: accepting on a QP of another provider")
	}
	if len(prm.PrivateData) > rdma.MaxPrivateData {
		r.Reject(nil)
		return fmt.Errorf("iwarp: accept private data of %d bytes exceeds %d", len(prm.PrivateData), rdma.MaxPrivateData)
	}
	var err error = rdma.ErrClosed
	r.once.Do(func() { err = r.accept(ctx, qp, prm) })
	return err
}

func (r *connReq) accept(ctx context.Context, qp *qp, prm rdma.ConnParam) error {
	cfg := &r.p.cfg
	ird := capDefault(prm.ResponderResources, cfg.MaxIRD)
	ord := capDefault(prm.InitiatorDepth, cfg.MaxORD)
	if r.f.Enhanced {
		// Relaxed negotiation as siw: never issue more Reads than the
		// peer accepts; the peer adapts its ORD to the IRD we reply.
		ord = min(ord, r.f.IRD)
	}
	rf := mpaFrame{
		Reply: true, Rev: r.f.Rev, Enhanced: r.f.Enhanced, CRC: r.f.CRC || cfg.CRC,
		IRD: ird, ORD: ord, PrivateData: prm.PrivateData,
	}
	if rf.Rev == 0 {
		rf.Rev = 1
	}
	rtr := rtrNone
	if r.f.Enhanced && r.f.P2P {
		// RFC 6581 §5: echo peer-to-peer mode and pick one RTR type;
		// siw prefers a zero-length Write.
		rf.P2P = true
		switch {
		case r.f.WriteRTR:
			rf.WriteRTR, rtr = true, rtrWrite
		case r.f.ReadRTR:
			rf.ReadRTR, rtr = true, rtrRead
		default:
			rf.WriteRTR, rtr = true, rtrWrite
		}
	}
	if err := qp.bind(r.c, true, rf.CRC, ird, ord, rtr); err != nil {
		r.c.Close()
		r.p.st.reject(rejectCanceled)
		return err
	}
	stop := deadlineFromContext(ctx, r.c)
	_, err := r.c.Write(appendMPA(nil, &rf))
	stop()
	if err != nil {
		r.p.st.reject(setupFailure(ctx, err))
		qp.fatalIO(fmt.Errorf("iwarp: sending MPA reply: %w", err))
		return fmt.Errorf("iwarp: sending MPA reply: %w", err)
	}
	qp.start()
	return nil
}

func capDefault(v, max int) int {
	if v <= 0 || v > max {
		return max
	}
	return v
}

// Connect implements rdma.QP: the MPA initiator.
func (q *qp) Connect(ctx context.Context, addr string, prm rdma.ConnParam) ([]byte, error) {
	if len(prm.PrivateData) > rdma.MaxPrivateData {
		return nil, fmt.Errorf("iwarp: connect private data of %d bytes exceeds %d", len(prm.PrivateData), rdma.MaxPrivateData)
	}
	q.mu.Lock()
	if q.state != rdma.QPInit {
		q.mu.Unlock()
		return nil, fmt.Errorf("iwarp: connect: QP is %s", q.state)
	}
	q.state = rdma.QPConnecting
	q.mu.Unlock()
	fail := func(err error) ([]byte, error) {
		q.mu.Lock()
		if q.state == rdma.QPConnecting {
			q.state = rdma.QPInit
		}
		q.mu.Unlock()
		return nil, err
	}

	p := q.pd.p
	cfg := &p.cfg
	timeout := cfg.HandshakeTimeout
	if timeout <= 0 {
		timeout = initiatorMPATimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		p.st.reject(setupFailure(ctx, err))
		return fail(fmt.Errorf("iwarp: connecting to %s: %w", addr, err))
	}
	setNoDelay(c)
	ird := capDefault(prm.ResponderResources, cfg.MaxIRD)
	ord := capDefault(prm.InitiatorDepth, cfg.MaxORD)
	req := mpaFrame{Rev: 2, Enhanced: true, CRC: cfg.CRC, IRD: ird, ORD: ord, PrivateData: prm.PrivateData}
	stop := deadlineFromContext(ctx, c)
	if _, err := c.Write(appendMPA(nil, &req)); err != nil {
		stop()
		c.Close()
		p.st.reject(setupFailure(ctx, err))
		return fail(fmt.Errorf("iwarp: sending MPA request to %s: %w", addr, err))
	}
	rep, err := readMPA(c, nil, true)
	stop()
	if err != nil {
		c.Close()
		p.st.reject(setupFailure(ctx, err))
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%v)", errMPATimeout, err)
		}
		return fail(fmt.Errorf("iwarp: reading MPA reply from %s: %w", addr, err))
	}
	if rep.Reject {
		c.Close()
		p.st.reject(rejectMPAReject)
		return fail(&rdma.RejectError{PrivateData: rep.PrivateData})
	}
	if rep.Markers {
		c.Close()
		p.st.reject(rejectInvalid)
		return fail(fmt.Errorf("iwarp: peer %s replied with MPA markers, which rdisk does not support", addr))
	}
	if rep.Enhanced {
		// Relaxed IRD/ORD negotiation (siw relaxed_ird_negotiation).
		if rep.ORD > cfg.MaxIRD {
			c.Close()
			p.st.reject(rejectInvalid)
			return fail(fmt.Errorf("iwarp: peer %s wants %d outstanding reads, more than the %d we accept", addr, rep.ORD, cfg.MaxIRD))
		}
		ird = max(ird, rep.ORD)
		ord = min(ord, rep.IRD)
	}
	if err := q.bind(c, false, rep.CRC, ird, ord, rtrNone); err != nil {
		c.Close()
		p.st.reject(rejectCanceled)
		return fail(err)
	}
	q.start()
	return rep.PrivateData, nil
}
