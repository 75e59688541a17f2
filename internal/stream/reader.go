// Package stream reads a framed protocol from a byte stream (a TCP socket)
// the way a storage transport needs it: headers through a small buffer,
// bulk payload straight into its destination.
//
// On a socket that exposes syscall.RawConn, one readv(2) fills the payload
// destination and, behind it, the header buffer with whatever follows (the
// next headers), so a PDU costs at most one system call and large payloads
// are not copied. How much a buffered read may take adapts to the traffic,
// as the iWARP receiver does: after a small payload the next read may fill
// the whole buffer (many small PDUs per system call), after a large one at
// most a tail's worth (the next header), so at most that much of a
// following large payload is copied.
//
// A Reader is owned by one goroutine; it is not safe for concurrent use.
// It allocates only in New.
package stream

import (
	"io"
	"net"
)

const (
	bufSize      = 16 << 10
	tailSize     = 512
	smallPayload = 8 << 10
)

// Reader reads from a stream through a header buffer.
type Reader struct {
	r    io.Reader
	buf  []byte
	s, e int // buffered bytes are buf[s:e]
	// lastLarge: the previous payload was larger than smallPayload.
	lastLarge bool
	// BeforeRead, if set, is called before each read from the stream:
	// everything read so far has been consumed, so a caller that holds
	// back answers (to send several in one write) sends them now.
	BeforeRead func()
	rv         Readv
}

// New returns a Reader on r with a 16 KiB buffer.
func New(r io.Reader) *Reader { return NewSize(r, bufSize) }

// NewSize returns a Reader on r with a buffer of size bytes (at least
// 16 KiB): a receiver of many small payloads (4 KiB read data) takes more
// of them per system call with a larger one.
func NewSize(r io.Reader, size int) *Reader {
	x := &Reader{r: r, buf: make([]byte, max(size, bufSize))}
	if c, ok := r.(net.Conn); ok {
		x.rv.Init(c)
	}
	return x
}

// Buffered returns the bytes read but not consumed.
func (x *Reader) Buffered() []byte { return x.buf[x.s:x.e] }

// Ensure makes at least n (at most the buffer's size) bytes available in
// Buffered.
func (x *Reader) Ensure(n int) error {
	if x.e-x.s >= n {
		return nil
	}
	if n > len(x.buf) {
		return io.ErrShortBuffer
	}
	if x.s > 0 {
		copy(x.buf, x.buf[x.s:x.e])
		x.e -= x.s
		x.s = 0
	}
	limit := len(x.buf)
	if x.lastLarge {
		limit = tailSize
	}
	for x.e < n {
		if x.BeforeRead != nil {
			x.BeforeRead()
		}
		k, err := x.r.Read(x.buf[x.e:max(limit, n)])
		x.e += k
		if err != nil && x.e < n {
			if err == io.EOF && x.e > 0 {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
	}
	return nil
}

// Peek returns the next n (at most the buffer's size) bytes without consuming them,
// reading as needed; the slice is valid until the next read.
func (x *Reader) Peek(n int) ([]byte, error) {
	if err := x.Ensure(n); err != nil {
		return nil, err
	}
	return x.buf[x.s : x.s+n], nil
}

// Consume drops n buffered bytes (n <= len(Buffered())).
func (x *Reader) Consume(n int) { x.s += n }

// Skip reads and drops n bytes.
func (x *Reader) Skip(n int) error {
	for n > 0 {
		if err := x.Ensure(1); err != nil {
			return err
		}
		k := min(n, x.e-x.s)
		x.s += k
		n -= k
	}
	return nil
}

// ReadFull fills dst: first from the buffer, then from the stream straight
// into dst.
func (x *Reader) ReadFull(dst []byte) error {
	k := copy(dst, x.buf[x.s:x.e])
	x.s += k
	x.lastLarge = len(dst) > smallPayload
	if k == len(dst) {
		return nil
	}
	return x.readRest(dst[k:])
}

// readRest fills dst from the stream; the buffer is empty.
func (x *Reader) readRest(dst []byte) error {
	if x.BeforeRead != nil {
		x.BeforeRead()
	}
	if !x.rv.Ok() {
		_, err := io.ReadFull(x.r, dst)
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return err
	}
	x.s, x.e = 0, 0
	n, err := x.rv.Fill(dst, x.buf, smallPayload, tailSize)
	x.e = n
	return err
}
