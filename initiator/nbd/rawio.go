package nbd

import (
	"io"
	"net"
	"syscall"
	"unsafe"
)

// sockIO reads and writes a connection's socket with raw system calls
// (syscall.RawSyscall on the non-blocking descriptor, waiting for
// readiness through the runtime's poller as net.Conn does).
//
// Why: every system call made through the syscall package's Syscall tells
// the scheduler (entersyscall), and the first one after the process's Ps
// were all idle wakes the runtime's sysmon thread from its deep sleep; sysmon
// then naps in 20 us steps until the Ps are idle again. A daemon that sleeps
// and wakes once per few NBD requests paid that cycle (a futex wake, a
// nanosleep or more, a futex wait: several context switches) each time: a
// fifth to a quarter of the daemon's CPU time in perf profiles. Raw calls on
// a non-blocking socket return at once (EAGAIN instead of blocking), so not
// telling the scheduler is safe; a large write copies at most the socket
// buffer per call. sysmon stays asleep only when every system call of a
// busy period is raw (the device's transport makes its own), so this is one
// half of that saving.
//
// A sockIO belongs to one goroutine per direction: Read to the reader,
// writev to the writer.
type sockIO struct {
	nc net.Conn
	rc syscall.RawConn // nil: not a socket with a descriptor; use nc

	// Read state (the reader's).
	p    []byte
	rn   int
	rerr error
	rfn  func(fd uintptr) bool

	// Write state (the writer's).
	bufs [][]byte
	iov  []syscall.Iovec
	wn   int
	werr error
	wfn  func(fd uintptr) bool
}

// maxIovec is the most iovecs one writev takes (Linux's IOV_MAX).
const maxIovec = 1024

func newSockIO(nc net.Conn) *sockIO {
	s := &sockIO{nc: nc}
	if sc, ok := nc.(syscall.Conn); ok {
		if rc, err := sc.SyscallConn(); err == nil {
			s.rc = rc
		}
	}
	s.rfn, s.wfn = s.doRead, s.doWrite
	return s
}

// Read implements io.Reader (the connection's bufio.Reader reads through
// it).
func (s *sockIO) Read(p []byte) (int, error) {
	if s.rc == nil || len(p) == 0 {
		return s.nc.Read(p)
	}
	s.p = p
	err := s.rc.Read(s.rfn)
	s.p = nil
	if err != nil {
		return 0, err // closed, or the deadline passed
	}
	return s.rn, s.rerr
}

func (s *sockIO) doRead(fd uintptr) bool {
	for {
		n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&s.p[0])), uintptr(len(s.p)))
		switch e {
		case 0:
			s.rn, s.rerr = int(n), nil
			if n == 0 {
				s.rerr = io.EOF
			}
			return true
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false // wait until readable
		}
		s.rn, s.rerr = 0, &net.OpError{Op: "read", Net: s.nc.LocalAddr().Network(), Source: s.nc.LocalAddr(), Addr: s.nc.RemoteAddr(), Err: e}
		return true
	}
}

// writev writes all of bufs; it consumes bufs' elements (as net.Buffers
// does).
func (s *sockIO) writev(bufs [][]byte) (int, error) {
	if s.rc == nil {
		b := net.Buffers(bufs)
		n, err := b.WriteTo(s.nc)
		return int(n), err
	}
	if s.iov == nil {
		s.iov = make([]syscall.Iovec, 0, maxIovec)
	}
	s.bufs, s.wn, s.werr = bufs, 0, nil
	err := s.rc.Write(s.wfn)
	s.bufs = nil
	if err == nil {
		err = s.werr
	}
	return s.wn, err
}

func (s *sockIO) doWrite(fd uintptr) bool {
	for {
		for len(s.bufs) > 0 && len(s.bufs[0]) == 0 {
			s.bufs = s.bufs[1:]
		}
		if len(s.bufs) == 0 {
			return true
		}
		iov := s.iov[:0]
		for _, b := range s.bufs {
			if len(iov) == maxIovec {
				break
			}
			if len(b) > 0 {
				iov = append(iov, syscall.Iovec{Base: &b[0], Len: uint64(len(b))})
			}
		}
		n, _, e := syscall.RawSyscall(syscall.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&iov[0])), uintptr(len(iov)))
		clear(iov) // drop the pointers into the buffers
		switch e {
		case 0:
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false // wait until writable
		default:
			s.werr = &net.OpError{Op: "write", Net: s.nc.LocalAddr().Network(), Source: s.nc.LocalAddr(), Addr: s.nc.RemoteAddr(), Err: e}
			return true
		}
		s.wn += int(n)
		for k := int(n); k > 0; {
			if k < len(s.bufs[0]) {
				s.bufs[0] = s.bufs[0][k:]
				break
			}
			k -= len(s.bufs[0])
			s.bufs[0] = nil
			s.bufs = s.bufs[1:]
		}
	}
}
