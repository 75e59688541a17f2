package stream

import (
	"io"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// Readv is a vectored read on a socket's raw file descriptor: one readv(2)
// fills a payload's destination and, behind it, a read-ahead buffer with
// whatever follows (the next headers). The iWARP receiver and Reader use
// it. fn is the method value, made once so that reads allocate nothing.
// A Readv is owned by one goroutine.
type Readv struct {
	rc  syscall.RawConn
	iov [2][]byte
	n   int
	err error
	fn  func(fd uintptr) bool
}

// Init prepares r for c and reports whether c has a raw socket (else Fill
// cannot be used and the caller reads c directly).
func (r *Readv) Init(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	r.rc = rc
	r.fn = r.do
	return true
}

// Ok reports whether Init found a raw socket.
func (r *Readv) Ok() bool { return r.rc != nil }

func (r *Readv) do(fd uintptr) bool {
	n, err := unix.Readv(int(fd), r.iov[:])
	if err == unix.EAGAIN || err == unix.EINTR {
		return false // wait for the poller, or retry
	}
	r.n, r.err = n, err
	return true
}

// Fill fills dst from the socket and returns how many bytes that followed
// it landed at the start of ahead. While more than small bytes of dst are
// left, at most tail bytes are read ahead (so little of a large payload
// that follows is copied later); else all of ahead may be filled.
func (r *Readv) Fill(dst, ahead []byte, small, tail int) (int, error) {
	for len(dst) > 0 {
		b := ahead
		if len(dst) > small {
			b = ahead[:tail]
		}
		r.iov[0], r.iov[1] = dst, b
		err := r.rc.Read(r.fn)
		n, rerr := r.n, r.err
		r.iov[0], r.iov[1] = nil, nil
		if err != nil {
			return 0, err
		}
		if rerr != nil {
			return 0, rerr
		}
		if n == 0 {
			return 0, io.ErrUnexpectedEOF
		}
		if n <= len(dst) {
			dst = dst[n:]
			continue
		}
		return n - len(dst), nil
	}
	return 0, nil
}
