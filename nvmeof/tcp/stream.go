package tcp

import (
	"fmt"
	"io"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// maxIOV is the most buffers one Writer.Flush hands to writev at once
// (Linux UIO_MAXIOV is 1024; a PDU is at most five).
const maxIOV = 64

// Writer sends PDUs on a stream socket with writev, gathering a PDU's
// header, digest, padding and data from where they lie, without copying
// and without allocating (net.Buffers allocates per write). It is not
// safe for concurrent use: the owner serializes Add and Flush (a mutex
// around a whole PDU or batch). The buffers added must stay untouched
// until Flush returns.
type Writer struct {
	rc   syscall.RawConn
	bufs [][]byte
	iov  [maxIOV]unix.Iovec
	// State of the Flush in progress, read by fn.
	done, skip int // bufs fully written; bytes of bufs[done] written
	used       int // iov entries holding pointers
	err        error
	fn         func(fd uintptr) bool
}

// NewWriter returns a Writer on c (a *net.TCPConn).
func NewWriter(c syscall.Conn) (*Writer, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("nvme/tcp: raw connection: %w", err)
	}
	w := &Writer{rc: rc, bufs: make([][]byte, 0, maxIOV)}
	w.fn = w.write
	return w, nil
}

// Add queues b for the next Flush (empty slices are skipped). More than
// maxIOV buffers are written in several writev calls.
func (w *Writer) Add(b []byte) {
	if len(b) > 0 {
		w.bufs = append(w.bufs, b)
	}
}

// Pending returns the number of bytes added and not yet flushed.
func (w *Writer) Pending() int {
	n := 0
	for _, b := range w.bufs {
		n += len(b)
	}
	return n
}

// Flush writes everything added, waiting for the socket to take it, and
// forgets the buffers. After an error the stream is broken (a partial PDU
// may have been sent).
func (w *Writer) Flush() error {
	if len(w.bufs) == 0 {
		return nil
	}
	w.done, w.skip, w.err = 0, 0, nil
	err := w.rc.Write(w.fn)
	clear(w.iov[:w.used]) // drop the pointers
	w.used = 0
	clear(w.bufs)
	w.bufs = w.bufs[:0]
	if err == nil {
		err = w.err
	}
	if err != nil {
		return fmt.Errorf("nvme/tcp: writing: %w", err)
	}
	return nil
}

// write is the RawConn callback: it runs writev until the buffers are out
// (true), the socket is full (false: the poller waits, then calls again)
// or an error (true, in w.err).
func (w *Writer) write(fd uintptr) bool {
	for w.done < len(w.bufs) {
		n := 0
		for i := w.done; i < len(w.bufs) && n < maxIOV; i++ {
			b := w.bufs[i]
			if i == w.done {
				b = b[w.skip:]
			}
			w.iov[n].Base = &b[0]
			w.iov[n].SetLen(len(b))
			n++
		}
		w.used = max(w.used, n)
		r, _, e := unix.Syscall(unix.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&w.iov[0])), uintptr(n))
		if e == unix.EINTR {
			continue
		}
		if e == unix.EAGAIN {
			return false
		}
		if e != 0 {
			w.err = e
			return true
		}
		if r == 0 {
			w.err = io.ErrShortWrite
			return true
		}
		for left := int(r); left > 0; {
			rest := len(w.bufs[w.done]) - w.skip
			if left < rest {
				w.skip += left
				break
			}
			left -= rest
			w.done++
			w.skip = 0
		}
	}
	return true
}
