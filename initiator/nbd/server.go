package nbd

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/rdisk/rdisk/blockdev"
)

// Export is a device the server offers under a name.
type Export struct {
	// Name is the export name clients ask for. The empty name (the
	// protocol's default export) reaches the server's first export.
	Name string
	// Description is sent to clients that ask for it.
	Description string
	// Dev is the device. The server drives it through Submit with buffers
	// it allocates per connection; it never closes it.
	Dev blockdev.Device
	// ReadOnly refuses writes, trims and write-zeroes with EPERM.
	ReadOnly bool
}

// Config tunes a Server. Zero fields take the defaults in brackets.
type Config struct {
	// Logger receives connection events [discard].
	Logger *slog.Logger
	// ChunkSize is the size of a connection's large buffers, the unit of
	// device requests for large I/O; it is capped at the device's
	// MaxTransfer [128 KiB].
	ChunkSize int
	// SmallChunks is the number of 4 KiB buffers per connection, one per
	// small request in flight [128].
	SmallChunks int
	// LargeChunks is the number of large buffers per connection; their
	// total is the largest request served without a copy (the maximum
	// block size advertised) [32].
	LargeChunks int
	// ConnHook, if set, is called with +1 when a client connection is
	// accepted and with -1 when it ends (rdisk's daemon sizes GOMAXPROCS
	// with it).
	ConnHook func(delta int)
}

// Server serves exports to NBD clients (fixed newstyle negotiation,
// simple replies). It is safe for concurrent use; each connection runs a
// reader and a writer goroutine.
type Server struct {
	cfg     Config
	log     *slog.Logger
	exports []*Export

	mu        sync.Mutex
	closed    bool
	listeners map[net.Listener]struct{}
	conns     map[net.Conn]*conn
	wg        sync.WaitGroup
}

// NewServer returns a server of the exports (at least one, unique names).
func NewServer(cfg Config, exports ...*Export) (*Server, error) {
	if len(exports) == 0 {
		return nil, errors.New("nbd: no exports")
	}
	seen := map[string]bool{}
	for _, e := range exports {
		if e.Dev == nil {
			return nil, fmt.Errorf("nbd: export %q has no device", e.Name)
		}
		if seen[e.Name] {
			return nil, fmt.Errorf("nbd: two exports named %q", e.Name)
		}
		if len(e.Name) > maxString || len(e.Description) > maxString {
			return nil, fmt.Errorf("nbd: export name or description longer than %d bytes", maxString)
		}
		seen[e.Name] = true
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.ChunkSize <= 0 {
		cfg.ChunkSize = 128 << 10
	}
	if cfg.SmallChunks <= 0 {
		cfg.SmallChunks = 128
	}
	if cfg.LargeChunks <= 0 {
		cfg.LargeChunks = 32
	}
	return &Server{cfg: cfg, log: cfg.Logger, exports: exports,
		listeners: map[net.Listener]struct{}{}, conns: map[net.Conn]*conn{}}, nil
}

// Serve accepts connections on l until l or the server is closed; it then
// returns nil (or the accept error).
func (s *Server) Serve(l net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		l.Close()
		return nil
	}
	s.listeners[l] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, l)
		s.mu.Unlock()
	}()
	var delay time.Duration
	for {
		nc, err := l.Accept()
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if closed || errors.Is(err, net.ErrClosed) {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				time.Sleep(delay)
				continue
			}
			return fmt.Errorf("nbd: accepting: %w", err)
		}
		delay = 0
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			if h := s.cfg.ConnHook; h != nil {
				h(1)
				defer h(-1)
			}
			s.ServeConn(nc)
		}()
	}
}

// ServeConn serves one client connection and closes it; it returns when
// the client leaves or the server closes.
func (s *Server) ServeConn(nc net.Conn) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		nc.Close()
		return
	}
	s.conns[nc] = nil
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.conns, nc)
		s.mu.Unlock()
	}()
	if tc, ok := nc.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	peer := nc.RemoteAddr().String()
	br := bufio.NewReaderSize(nc, 64<<10)
	bw := bufio.NewWriterSize(nc, 4<<10)
	neg := &negotiation{br: br, bw: bw, lookup: s.lookup, list: func() []*Export { return s.exports },
		blockInfo: s.blockInfo, tflags: s.tflags}
	nc.SetDeadline(time.Now().Add(30 * time.Second))
	e, err := neg.run()
	nc.SetDeadline(time.Time{})
	if err != nil {
		if !errors.Is(err, errAbort) && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
			s.log.Warn("nbd: negotiation failed", "peer", peer, "err", err)
		}
		nc.Close()
		return
	}
	c, err := newConn(s, e, nc, br)
	if err != nil {
		s.log.Warn("nbd: connection setup failed", "peer", peer, "export", e.Name, "err", err)
		nc.Close()
		return
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		c.stop()
	} else {
		s.conns[nc] = c
		s.mu.Unlock()
	}
	s.log.Debug("nbd: client connected", "peer", peer, "export", e.Name, "block-size-aware", neg.askedBlockSize)
	if err := c.run(); err != nil && !errors.Is(err, errClosing) {
		s.log.Warn("nbd: connection ended", "peer", peer, "export", e.Name, "err", err)
	}
}

// Close stops accepting, closes every connection and makes blocked
// readers give up. It does not wait: requests in flight complete when the
// device completes them (Wait waits for that).
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	for l := range s.listeners {
		l.Close()
	}
	for nc, c := range s.conns {
		if c != nil {
			c.stop()
		} else {
			nc.Close()
		}
	}
	s.mu.Unlock()
	return nil
}

// Wait waits until every connection served by Serve has ended.
func (s *Server) Wait() { s.wg.Wait() }

// Conns returns the number of client connections.
func (s *Server) Conns() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

func (s *Server) lookup(name string) *Export {
	if name == "" {
		return s.exports[0]
	}
	for _, e := range s.exports {
		if e.Name == name {
			return e
		}
	}
	return nil
}

// blockInfo is NBD_INFO_BLOCK_SIZE: the device's block size, 4 KiB
// preferred, and the largest request served from a connection's buffers.
func (s *Server) blockInfo(e *Export) (uint32, uint32, uint32) {
	info := e.Dev.Info()
	bs := info.BlockSize
	large := max(min(info.MaxTransfer, s.cfg.ChunkSize/bs*bs), min(max(4096, bs), info.MaxTransfer))
	return uint32(bs), uint32(max(4096, bs)), uint32(large * s.cfg.LargeChunks)
}

// tflags are the transmission flags of an export.
func (s *Server) tflags(e *Export) uint16 {
	caps := e.Dev.Info().Caps
	f := uint16(tflagHasFlags | tflagSendFlush | tflagSendFUA | tflagCanMultiConn)
	if e.ReadOnly || caps.Has(blockdev.CapReadOnly) {
		return f | tflagReadOnly
	}
	f |= tflagSendWriteZeroe
	if caps.Has(blockdev.CapDiscard) {
		f |= tflagSendTrim
	}
	return f
}
