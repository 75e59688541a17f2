package nbd

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"

	"github.com/rdisk/rdisk/blockdev"
	"github.com/rdisk/rdisk/initiator/blockio"
)

// chunk is one piece of a connection's registered arena.
type chunk struct {
	data  []byte // arena[off : off+size]
	off   int
	small bool
}

// part is one device request of an NBD request.
type part struct {
	req blockdev.Request
	ck  *chunk
}

// Control stages of an op's ctl request.
const (
	stageNone  uint8 = iota
	stageChain       // trim / write-zeroes pieces, one after the other
	stageFlush       // the flush of a flush command, or after a FUA write
)

// op is one NBD request from header to reply. Ops are allocated once per
// connection and reused.
type op struct {
	c      *conn
	typ    uint16
	flags  uint16
	cookie uint64
	off    int64
	length int

	parts    []part // len: the pieces in use
	partsBuf []part
	pending  atomic.Int32
	errno    atomic.Uint32

	ctl       blockdev.Request
	stage     uint8
	chainEnd  int64
	postFlush bool

	reply [simpleReplySize]byte
	data  []byte // slow-path read data (plain memory)
}

func (o *op) setErr(errno uint32) { o.errno.CompareAndSwap(0, errno) }

// conn is one client connection in the transmission phase. The reader
// goroutine (serve) parses requests and submits them; device callbacks
// complete them onto replies; one writer goroutine sends the replies,
// batching those that are ready into one vectored write.
type conn struct {
	srv  *Server
	exp  *Export
	nc   net.Conn
	br   *bufio.Reader
	dev  blockdev.Device
	info blockdev.Info
	lim  limits

	arena      blockdev.Buffer
	smallSize  int
	largeSize  int
	arenaMax   int // the largest read or write served from the arena
	freeSmall  chan *chunk
	freeLarge  chan *chunk
	freeOps    chan *op
	replies    chan *op
	active     sync.WaitGroup
	writerDone chan struct{}
	closing    chan struct{}
	slow       *blockio.Pool
	nextQ      int
	hdr        [requestSize]byte

	// Writer state.
	iov   [][]byte
	bufs  net.Buffers
	batch [64]*op
	werr  error

	// Callbacks bound once (method values allocate).
	onPartFn func(*blockdev.Request)
	onCtlFn  func(*blockdev.Request)
}

// maxPayload is the largest request the server accepts at all (the
// protocol's customary 32 MiB); requests above the arena go through the
// slow path.
const maxPayload = 32 << 20

// newConn sets up the transmission state of a negotiated connection.
func newConn(s *Server, e *Export, nc net.Conn, br *bufio.Reader) (*conn, error) {
	info := e.Dev.Info()
	bs := info.BlockSize
	c := &conn{srv: s, exp: e, nc: nc, br: br, dev: e.Dev, info: info, writerDone: make(chan struct{}), closing: make(chan struct{})}
	c.lim = limits{size: info.Size, tflags: s.tflags(e), maxPayload: maxPayload}
	c.smallSize = min(max(4096, bs), info.MaxTransfer)
	c.largeSize = max(min(info.MaxTransfer, s.cfg.ChunkSize/bs*bs), c.smallSize)
	nSmall, nLarge := s.cfg.SmallChunks, s.cfg.LargeChunks
	c.arenaMax = nLarge * c.largeSize
	arena, err := c.dev.AllocBuffer(nSmall*c.smallSize + nLarge*c.largeSize)
	if err != nil {
		return nil, fmt.Errorf("nbd: allocating the connection's buffers: %w", err)
	}
	c.arena = arena
	mem := arena.Bytes()
	c.freeSmall = make(chan *chunk, nSmall)
	c.freeLarge = make(chan *chunk, nLarge)
	off := 0
	for range nSmall {
		c.freeSmall <- &chunk{data: mem[off : off+c.smallSize : off+c.smallSize], off: off, small: true}
		off += c.smallSize
	}
	for range nLarge {
		c.freeLarge <- &chunk{data: mem[off : off+c.largeSize : off+c.largeSize], off: off}
		off += c.largeSize
	}
	nOps := nSmall + nLarge + 16
	maxParts := (c.arenaMax + c.largeSize - 1) / c.largeSize
	c.freeOps = make(chan *op, nOps)
	c.replies = make(chan *op, nOps)
	c.iov = make([][]byte, max(512, 4*(maxParts+2)))
	for range nOps {
		o := &op{c: c, partsBuf: make([]part, maxParts)}
		c.freeOps <- o
	}
	c.onPartFn = c.onPart
	c.onCtlFn = c.onCtl
	return c, nil
}

// run serves the connection until the client leaves or the server closes,
// then waits for every request to be answered and frees the buffers.
func (c *conn) run() error {
	go c.writeLoop()
	err := c.serve()
	c.active.Wait()
	close(c.replies)
	<-c.writerDone
	if c.slow != nil {
		c.slow.Close()
	}
	c.arena.Release()
	c.nc.Close()
	if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

// stop makes a blocked reader give up (the server is closing).
func (c *conn) stop() {
	select {
	case <-c.closing:
	default:
		close(c.closing)
	}
	c.nc.Close()
}

var errClosing = errors.New("nbd: server closing")

// getOp takes a free op, waiting for one (or for the server to close).
// The common case, an op free, is a plain non-blocking receive: a select
// over two channels locks both, and it ran once per request.
func (c *conn) getOp() (*op, error) {
	var o *op
	select {
	case o = <-c.freeOps:
	default:
		select {
		case o = <-c.freeOps:
		case <-c.closing:
			return nil, errClosing
		}
	}
	c.active.Add(1)
	return o, nil
}

func (c *conn) getChunk(small bool) *chunk {
	ch := c.freeLarge
	if small {
		ch = c.freeSmall
	}
	select {
	case ck := <-ch:
		return ck
	default:
	}
	select {
	case ck := <-ch:
		return ck
	case <-c.closing:
		return nil
	}
}

func (c *conn) putChunk(ck *chunk) {
	if ck.small {
		c.freeSmall <- ck
	} else {
		c.freeLarge <- ck
	}
}

// serve is the reader loop.
func (c *conn) serve() error {
	for {
		if _, err := io.ReadFull(c.br, c.hdr[:]); err != nil {
			return err
		}
		h := requestHeader(c.hdr[:])
		v, errno := checkRequest(h, c.lim)
		switch v {
		case hangUp:
			return fmt.Errorf("nbd: bad request (magic %#x, type %d, length %d): closing the connection", h.magic(), h.typ(), h.length())
		case disconnect:
			return nil
		}
		o, err := c.getOp()
		if err != nil {
			return err
		}
		o.typ, o.flags, o.cookie = h.typ(), h.flags(), h.cookie()
		o.off, o.length = int64(h.offset()), int(h.length())
		o.errno.Store(0)
		o.parts, o.data, o.stage, o.postFlush = nil, nil, stageNone, false
		if v == replyError {
			if o.typ == cmdWrite {
				if _, err := io.CopyN(io.Discard, c.br, int64(o.length)); err != nil {
					c.release(o)
					return err
				}
			}
			o.setErr(errno)
			c.finish(o)
			continue
		}
		if err := c.dispatch(o); err != nil {
			return err
		}
	}
}

// queue picks the device queue of the next request: the queues in turn.
// (One queue per connection halved the writev calls per request and cut
// the daemon's CPU per request by a fifth, at the same IOPS on a quiet
// 2-core machine; with other load on it, it lost 30-75% of the IOPS,
// probably because the target then serves the connection with one thread.)
func (c *conn) queue() int {
	c.nextQ++
	return c.nextQ
}

// dispatch starts one valid request. An error means the stream is broken
// (the op has been completed or released).
func (c *conn) dispatch(o *op) error {
	bs := int64(c.info.BlockSize)
	fua := o.flags&cmdFlagFUA != 0
	switch o.typ {
	case cmdFlush:
		c.startCtl(o, blockdev.OpFlush, 0, 0, stageFlush)
		return nil
	case cmdTrim:
		// Trim is advisory: trim the whole blocks inside the range.
		start := (o.off + bs - 1) / bs * bs
		end := (o.off + int64(o.length)) / bs * bs
		o.postFlush = fua && c.info.Caps.Has(blockdev.CapFlush)
		if end <= start {
			c.complete(o)
			return nil
		}
		o.chainEnd = end
		c.startCtl(o, blockdev.OpDiscard, start, end, stageChain)
		return nil
	case cmdWriteZeroes:
		o.postFlush = fua && c.info.Caps.Has(blockdev.CapFlush)
		if o.off%bs != 0 || int64(o.length)%bs != 0 || !c.info.Caps.Has(blockdev.CapWriteZeroes) {
			return c.slowPath(o)
		}
		o.chainEnd = o.off + int64(o.length)
		c.startCtl(o, blockdev.OpWriteZeroes, o.off, o.chainEnd, stageChain)
		return nil
	}
	// Read or write.
	if o.off%bs != 0 || int64(o.length)%bs != 0 || o.length > c.arenaMax {
		return c.slowPath(o)
	}
	var flags blockdev.Flags
	if o.typ == cmdWrite && fua {
		if c.info.Caps.Has(blockdev.CapFUA) {
			flags = blockdev.FUA
		} else if c.info.Caps.Has(blockdev.CapFlush) {
			o.postFlush = true
		}
	}
	small := o.length <= c.smallSize
	piece := c.largeSize
	if small {
		piece = c.smallSize
	}
	n := (o.length + piece - 1) / piece
	o.parts = o.partsBuf[:n]
	o.pending.Store(int32(n + 1)) // +1: the guard dropped once all are submitted
	dop := blockdev.OpRead
	if o.typ == cmdWrite {
		dop = blockdev.OpWrite
	}
	q := c.queue()
	var broken error
	for i := range n {
		p := &o.parts[i]
		p.ck = nil
		plen := min(piece, o.length-i*piece)
		if broken != nil {
			o.pending.Add(-1)
			continue
		}
		ck := c.getChunk(small)
		if ck == nil {
			broken = errClosing
			o.setErr(errShutdown)
			o.pending.Add(-1)
			continue
		}
		if dop == blockdev.OpWrite {
			if _, err := io.ReadFull(c.br, ck.data[:plen]); err != nil {
				c.putChunk(ck)
				broken = err
				o.setErr(errIO)
				o.pending.Add(-1)
				continue
			}
		}
		p.ck = ck
		p.req = blockdev.Request{Op: dop, Flags: flags, Offset: o.off + int64(i*piece), Length: plen,
			Buf: c.arena, BufOff: ck.off, Queue: q, Done: c.onPartFn, Ctx: o, Tag: uint64(i)}
		if err := c.dev.Submit(&p.req); err != nil {
			o.setErr(errnoOf(o.typ, err))
			if dop == blockdev.OpWrite {
				p.ck = nil
				c.putChunk(ck)
			}
			o.pending.Add(-1)
		}
	}
	if o.pending.Add(-1) == 0 {
		c.complete(o)
	}
	return broken
}

// startCtl submits the op's control request: a flush, or the first piece
// of a trim / write-zeroes chain over [off, end).
func (c *conn) startCtl(o *op, dop blockdev.Op, off, end int64, stage uint8) {
	o.stage = stage
	r := &o.ctl
	*r = blockdev.Request{Op: dop, Offset: off, Queue: c.queue(), Done: c.onCtlFn, Ctx: o}
	if stage == stageChain {
		r.Length = c.chainPiece(off, end)
	}
	if err := c.dev.Submit(r); err != nil {
		o.setErr(errnoOf(o.typ, err))
		c.finish(o)
	}
}

// chainPiece is the length of the next trim / write-zeroes piece.
func (c *conn) chainPiece(off, end int64) int {
	bs := int64(c.info.BlockSize)
	step := max(c.info.MaxZeroes/bs*bs, bs)
	step = min(step, 1<<30)
	return int(min(end-off, step))
}

// onPart is the completion of one piece of a read or write.
func (c *conn) onPart(r *blockdev.Request) {
	o := r.Ctx.(*op)
	if r.Err != nil {
		o.setErr(errnoOf(o.typ, r.Err))
	}
	if o.typ == cmdWrite {
		p := &o.parts[r.Tag]
		c.putChunk(p.ck)
		p.ck = nil
	}
	if o.pending.Add(-1) == 0 {
		c.complete(o)
	}
}

// complete runs after the data pieces: a flush for emulated FUA, then the
// reply.
func (c *conn) complete(o *op) {
	if o.postFlush && o.errno.Load() == 0 {
		o.stage = stageFlush
		o.ctl = blockdev.Request{Op: blockdev.OpFlush, Queue: c.queue(), Done: c.onCtlFn, Ctx: o}
		if err := c.dev.Submit(&o.ctl); err != nil {
			o.setErr(errnoOf(o.typ, err))
			c.finish(o)
		}
		return
	}
	c.finish(o)
}

// onCtl is the completion of a control request.
func (c *conn) onCtl(r *blockdev.Request) {
	o := r.Ctx.(*op)
	if r.Err != nil {
		o.setErr(errnoOf(o.typ, r.Err))
		c.finish(o)
		return
	}
	if o.stage == stageChain {
		if next := r.Offset + int64(r.Length); next < o.chainEnd {
			r.Offset, r.Length, r.Err = next, c.chainPiece(next, o.chainEnd), nil
			if err := c.dev.Submit(r); err != nil {
				o.setErr(errnoOf(o.typ, err))
				c.finish(o)
			}
			return
		}
		o.stage = stageNone
		c.complete(o)
		return
	}
	c.finish(o)
}

// finish queues the op's reply for the writer. It never blocks: replies
// has room for every op.
func (c *conn) finish(o *op) {
	encodeSimpleReply(o.reply[:], o.errno.Load(), o.cookie)
	c.replies <- o
}

// slowPath serves, synchronously in the reader, what the arena cannot:
// unaligned reads and writes (read-modify-write), requests larger than the
// arena, and write-zeroes that need emulation. It allocates.
func (c *conn) slowPath(o *op) error {
	if c.slow == nil {
		p, err := blockio.NewPool(c.dev, c.largeSize, 2)
		if err != nil {
			if o.typ == cmdWrite {
				if _, err := io.CopyN(io.Discard, c.br, int64(o.length)); err != nil {
					c.release(o)
					return err
				}
			}
			o.setErr(errNoMem)
			c.finish(o)
			return nil
		}
		c.slow = p
	}
	fua := o.flags&cmdFlagFUA != 0
	var err error
	switch o.typ {
	case cmdRead:
		o.data = make([]byte, o.length)
		err = c.slow.ReadAt(o.data, o.off)
	case cmdWrite:
		data := make([]byte, o.length)
		if _, rerr := io.ReadFull(c.br, data); rerr != nil {
			c.release(o)
			return rerr
		}
		err = c.slow.WriteAt(data, o.off, fua)
	case cmdWriteZeroes:
		err = c.slow.Zero(o.off, int64(o.length), false)
		if err == nil && fua {
			err = c.slow.Flush()
		}
	}
	if err != nil {
		o.data = nil
		o.setErr(errnoOf(o.typ, err))
	}
	c.finish(o)
	return nil
}

// release returns an op and its read chunks after its reply went out (or
// could not).
func (c *conn) release(o *op) {
	for i := range o.parts {
		if p := &o.parts[i]; p.ck != nil {
			c.putChunk(p.ck)
			p.ck = nil
		}
	}
	o.parts, o.data = nil, nil
	c.freeOps <- o
	c.active.Done()
}

// writeLoop sends replies until replies is closed.
func (c *conn) writeLoop() {
	defer close(c.writerDone)
	for {
		o, ok := <-c.replies
		if !ok {
			return
		}
		nb, niov := 0, 0
		for {
			c.batch[nb] = o
			nb++
			niov = c.addReply(o, niov)
			if nb == len(c.batch) || niov+cap(o.partsBuf)+2 > len(c.iov) {
				break
			}
			select {
			case o, ok = <-c.replies:
			default:
				ok = false
			}
			if !ok || o == nil {
				break
			}
		}
		if c.werr == nil {
			c.bufs = c.iov[:niov]
			if _, err := c.bufs.WriteTo(c.nc); err != nil {
				c.werr = err
				c.nc.Close()
			}
		}
		for i := range c.batch[:nb] {
			c.release(c.batch[i])
			c.batch[i] = nil
		}
		for i := range c.iov[:niov] {
			c.iov[i] = nil
		}
	}
}

// addReply appends the op's reply (header, and the data of a successful
// read) to the iovec.
func (c *conn) addReply(o *op, n int) int {
	c.iov[n] = o.reply[:]
	n++
	if o.typ != cmdRead || o.errno.Load() != 0 {
		return n
	}
	if o.data != nil {
		c.iov[n] = o.data
		return n + 1
	}
	for i := range o.parts {
		p := &o.parts[i]
		c.iov[n] = p.ck.data[:p.req.Length]
		n++
	}
	return n
}

// errnoOf maps a device error to the NBD error of a command.
func errnoOf(typ uint16, err error) uint32 {
	switch {
	case errors.Is(err, blockdev.ErrReadOnly):
		return errPerm
	case errors.Is(err, blockdev.ErrRange):
		if typ == cmdWrite || typ == cmdWriteZeroes {
			return errNoSpc
		}
		return errInval
	case errors.Is(err, blockdev.ErrUnsupported):
		return errNotSup
	case errors.Is(err, blockdev.ErrInvalid), errors.Is(err, blockdev.ErrAlignment),
		errors.Is(err, blockdev.ErrTooLarge), errors.Is(err, blockdev.ErrBuffer):
		return errInval
	}
	return errIO
}
