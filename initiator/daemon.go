package initiator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rdisk/rdisk/blockdev"
	"github.com/rdisk/rdisk/initiator/fusefile"
	"github.com/rdisk/rdisk/initiator/multipath"
	"github.com/rdisk/rdisk/initiator/nbd"
)

// DaemonConfig configures a Daemon.
type DaemonConfig struct {
	// Dialers open devices by URL scheme.
	Dialers Dialers
	// LossTimeout, ReconnectDelay and ConnectTimeout are the session
	// defaults (see SessionConfig). A multipath session's I/O waits for a
	// usable path for LossTimeout; its path sessions reconnect forever.
	LossTimeout, ReconnectDelay, ConnectTimeout time.Duration
	// RecheckInterval is how often a multipath session re-reads the access
	// state of its unusable paths (multipath.Config) [the reconnect delay].
	RecheckInterval time.Duration
	// NBD tunes the NBD servers.
	NBD nbd.Config
	// DefaultNBDDir, if set, gives a session that names no export an NBD
	// unix socket DIR/NAME.nbd.
	DefaultNBDDir string
	// Logger [discard].
	Logger *slog.Logger
}

// Daemon holds the initiator's sessions and their exports. Its methods are
// safe for concurrent use.
type Daemon struct {
	cfg DaemonConfig
	log *slog.Logger

	mu       sync.Mutex
	sessions map[string]*entry
	pending  map[string]bool // names being connected
	closed   bool
	idle     chan struct{} // signalled when the last session goes
	// connected is signalled each time a Connect ends (Shutdown waits
	// for those in progress).
	connected chan struct{}
	// ctl are the control listeners ServeControl serves (Shutdown closes
	// them).
	ctl map[*net.UnixListener]struct{}
}

type entry struct {
	name   string
	scheme string
	// dev is what the exports serve: sess, or mp over the path sessions.
	dev     blockdev.Device
	sess    *Session
	mp      *multipath.Device
	urls    []string // a multipath session's paths, in the spec's order
	policy  string
	created time.Time

	// pathsMu guards paths and connecting, which the path adders change.
	pathsMu    sync.Mutex
	paths      map[string]*Session // a multipath session's path sessions by URL
	connecting map[string]error    // paths whose first connection is retried, and its last error
	stopAdders context.CancelFunc
	adders     sync.WaitGroup

	nbd      *nbd.Server
	nbdAddrs []string
	sockets  []string // unix socket files to remove
	serving  sync.WaitGroup
	fuse     *fusefile.Mount
	fuseDir  string        // the FUSE mount's directory, cleaned
	closing  bool          // a Disconnect or Shutdown is running
	settled  chan struct{} // closed when that Disconnect or Shutdown ends
}

// isMountPoint tells whether dir is a mount point (in /proc/self/mountinfo).
func isMountPoint(dir string) bool {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return false
	}
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT ...; spaces are octal escaped.
		f := strings.Fields(line)
		if len(f) > 4 && strings.ReplaceAll(f[4], "\\040", " ") == abs {
			return true
		}
	}
	return false
}

// NewDaemon returns a daemon with no sessions.
func NewDaemon(cfg DaemonConfig) *Daemon {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Daemon{cfg: cfg, log: cfg.Logger, sessions: map[string]*entry{}, pending: map[string]bool{}, idle: make(chan struct{}, 1),
		connected: make(chan struct{}, 1), ctl: map[*net.UnixListener]struct{}{}}
}

// Idle receives a value each time the last session is disconnected.
func (d *Daemon) Idle() <-chan struct{} { return d.idle }

// Connect opens a session and its exports. It fails, undoing everything,
// when the name is taken, the first connection fails or an export cannot
// be set up.
func (d *Daemon) Connect(ctx context.Context, spec ConnectSpec) (SessionInfo, error) {
	if err := spec.Validate(); err != nil {
		return SessionInfo{}, err
	}
	urls := spec.PathURLs()
	dials := make([]Dialer, len(urls))
	var schemes []string
	for i, u := range urls {
		dial, scheme, err := d.cfg.Dialers.Lookup(u)
		if err != nil {
			return SessionInfo{}, err
		}
		dials[i] = dial
		if !slices.Contains(schemes, scheme) {
			schemes = append(schemes, scheme)
		}
	}
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return SessionInfo{}, errors.New("the daemon is shutting down")
	}
	name := spec.Name
	if name == "" {
		for i := 0; ; i++ {
			name = "disk" + strconv.Itoa(i)
			if d.sessions[name] == nil && !d.pending[name] {
				break
			}
		}
	} else if d.sessions[name] != nil || d.pending[name] {
		d.mu.Unlock()
		return SessionInfo{}, fmt.Errorf("a session named %q exists (rdisk disconnect %s, or pick another --name)", name, name)
	}
	for _, e := range d.sessions {
		for _, u := range urls {
			if slices.Contains(e.pathURLs(), u) {
				d.log.Warn("daemon: a second session to the same disk", "url", u, "other", e.name)
			}
		}
	}
	if spec.FUSE != "" {
		// Refused rather than mounted over: a second FUSE mount on one
		// directory hides the first disk.
		for _, e := range d.sessions {
			if e.fuseDir == filepath.Clean(spec.FUSE) {
				d.mu.Unlock()
				return SessionInfo{}, fmt.Errorf("--fuse %s is session %s's mount already (rdisk disconnect %s, or pick another directory)", spec.FUSE, e.name, e.name)
			}
		}
		if isMountPoint(spec.FUSE) {
			d.mu.Unlock()
			return SessionInfo{}, fmt.Errorf("--fuse %s is a mount point already: pick an unmounted directory", spec.FUSE)
		}
	}
	d.pending[name] = true
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		delete(d.pending, name)
		// A connect that failed leaves a daemon started for it idle: tell
		// an --exit-when-idle daemon so it does not linger.
		idle := d.sessions[name] == nil && len(d.sessions) == 0 && len(d.pending) == 0
		d.mu.Unlock()
		select {
		case d.connected <- struct{}{}:
		default:
		}
		if idle {
			select {
			case d.idle <- struct{}{}:
			default:
			}
		}
	}()

	if len(spec.NBD) == 0 && spec.FUSE == "" && d.cfg.DefaultNBDDir != "" {
		spec.NBD = []string{"unix:" + filepath.Join(d.cfg.DefaultNBDDir, name+".nbd")}
	}
	e := &entry{name: name, scheme: strings.Join(schemes, ","), created: time.Now()}
	cfg := SessionConfig{URL: urls[0], Dial: dials[0], LossTimeout: d.cfg.LossTimeout, ReconnectDelay: d.cfg.ReconnectDelay,
		ConnectTimeout: d.cfg.ConnectTimeout, Logger: d.log.With("session", name)}
	if spec.LossTimeoutMS != 0 {
		cfg.LossTimeout = time.Duration(spec.LossTimeoutMS) * time.Millisecond
	}
	if spec.ReconnectDelayMS != 0 {
		cfg.ReconnectDelay = time.Duration(spec.ReconnectDelayMS) * time.Millisecond
	}
	if len(urls) == 1 {
		sess, err := NewSession(ctx, cfg)
		if err != nil {
			return SessionInfo{}, fmt.Errorf("connecting to %s: %w", spec.URL, err)
		}
		e.sess, e.dev = sess, sess
	} else if err := d.connectMultipath(ctx, e, spec, urls, dials, cfg); err != nil {
		return SessionInfo{}, err
	}
	if err := d.export(e, spec); err != nil {
		d.teardown(e, true)
		return SessionInfo{}, err
	}
	d.mu.Lock()
	closed := d.closed
	if !closed {
		d.sessions[name] = e
	}
	d.mu.Unlock()
	if closed {
		d.teardown(e, true)
		return SessionInfo{}, errors.New("the daemon is shutting down")
	}
	d.log.Info("daemon: session connected", "session", name, "url", strings.Join(urls, " "), "reason", "connect requested", "size", e.dev.Info().Size, "exports", e.exports())
	return d.info(e), nil
}

// export starts the session's NBD listeners and FUSE mount.
func (d *Daemon) export(e *entry, spec ConnectSpec) error {
	if len(spec.NBD) > 0 {
		srv, err := nbd.NewServer(withLogger(d.cfg.NBD, d.log.With("session", e.name)),
			&nbd.Export{Name: e.name, Description: strings.Join(spec.PathURLs(), " "), Dev: e.dev, ReadOnly: spec.ReadOnly})
		if err != nil {
			return err
		}
		e.nbd = srv
		for _, a := range spec.NBD {
			network, addr, _ := ParseNBDAddr(a)
			if network == "unix" {
				if err := removeStaleSocket(addr); err != nil {
					return err
				}
			}
			l, err := net.Listen(network, addr)
			if err != nil {
				return fmt.Errorf("NBD listener %s: %w", a, err)
			}
			if network == "unix" {
				e.sockets = append(e.sockets, addr)
				if err := os.Chmod(addr, 0o600); err != nil {
					l.Close()
					return err
				}
				e.nbdAddrs = append(e.nbdAddrs, "unix:"+addr)
			} else {
				e.nbdAddrs = append(e.nbdAddrs, "tcp:"+l.Addr().String())
			}
			e.serving.Add(1)
			go func() {
				defer e.serving.Done()
				if err := srv.Serve(l); err != nil {
					d.log.Error("daemon: NBD listener failed", "session", e.name, "addr", a, "err", err)
				}
			}()
		}
	}
	if spec.FUSE != "" {
		e.fuseDir = filepath.Clean(spec.FUSE)
		if err := os.MkdirAll(spec.FUSE, 0o700); err != nil {
			return fmt.Errorf("FUSE directory: %w", err)
		}
		m, err := fusefile.New(fusefile.Config{Dir: spec.FUSE, Name: e.name, Dev: e.dev, ReadOnly: spec.ReadOnly,
			Logger: d.log.With("session", e.name)})
		if err != nil {
			return err
		}
		e.fuse = m
	}
	return nil
}

func withLogger(c nbd.Config, l *slog.Logger) nbd.Config {
	c.Logger = l
	return c
}

// removeStaleSocket removes a unix socket file nobody listens on; it
// refuses to touch anything else.
func removeStaleSocket(path string) error {
	st, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return os.MkdirAll(filepath.Dir(path), 0o755)
	}
	if err != nil {
		return err
	}
	if st.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("NBD socket %s exists and is not a socket", path)
	}
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return fmt.Errorf("NBD socket %s is in use", path)
	}
	return os.Remove(path)
}

// teardown stops a session's exports and closes it. Without force a busy
// FUSE mount makes it fail before anything is stopped.
func (d *Daemon) teardown(e *entry, force bool) error {
	if err := d.unmount(e, force); err != nil {
		return err
	}
	if e.nbd != nil {
		e.nbd.Close()
	}
	return d.closeSession(e)
}

// unmount unmounts the session's FUSE file system, if any. Without force a
// busy mount fails with fusefile.ErrBusy; with it, a busy mount is detached
// lazily (its users keep it until they let go).
func (d *Daemon) unmount(e *entry, force bool) error {
	if e.fuse != nil {
		if err := e.fuse.Unmount(force); err != nil {
			if errors.Is(err, fusefile.ErrBusy) {
				return err
			}
			d.log.Warn("daemon: unmounting; detaching instead", "session", e.name, "err", err)
			if err := e.fuse.Unmount(true); err != nil {
				d.log.Error("daemon: detaching the FUSE mount", "session", e.name, "err", err)
			}
		}
	}
	return nil
}

// closeSession closes the session, once its exports stopped taking
// requests: requests still in flight fail, and the NBD connections, which
// wait for theirs, end.
func (d *Daemon) closeSession(e *entry) error {
	if e.stopAdders != nil {
		e.stopAdders()
		e.adders.Wait()
	}
	err := e.dev.Close()
	if e.nbd != nil {
		e.nbd.Wait()
		e.serving.Wait()
	}
	for _, s := range e.sockets {
		os.Remove(s)
	}
	return err
}

// Disconnect removes a session: its exports stop, then the session closes.
func (d *Daemon) Disconnect(name string, force bool) (SessionInfo, error) {
	return d.disconnect(name, force, "disconnect requested")
}

func (d *Daemon) disconnect(name string, force bool, reason string) (SessionInfo, error) {
	d.mu.Lock()
	e := d.sessions[name]
	if e != nil && e.closing {
		d.mu.Unlock()
		return SessionInfo{}, fmt.Errorf("session %q is being disconnected", name)
	}
	if e != nil {
		d.claim(e)
	}
	d.mu.Unlock()
	if e == nil {
		return SessionInfo{}, fmt.Errorf("no session named %q (rdisk list shows them)", name)
	}
	info := d.info(e)
	if err := d.teardown(e, force); errors.Is(err, fusefile.ErrBusy) {
		d.mu.Lock()
		d.unclaim(e)
		d.mu.Unlock()
		return SessionInfo{}, err
	} else if err != nil {
		d.log.Warn("daemon: closing session", "session", name, "err", err)
	}
	d.remove(e, reason)
	info.State = StateClosed.String()
	return info, nil
}

// claim marks e as being disconnected (d.mu held).
func (d *Daemon) claim(e *entry) {
	e.closing = true
	e.settled = make(chan struct{})
}

// unclaim gives e back after a disconnect that did not happen (d.mu held).
func (d *Daemon) unclaim(e *entry) {
	e.closing = false
	close(e.settled)
	e.settled = nil
}

// remove forgets the disconnected session e, logs it, and signals Idle
// when it was the last.
func (d *Daemon) remove(e *entry, reason string) {
	d.mu.Lock()
	delete(d.sessions, e.name)
	close(e.settled)
	last := len(d.sessions) == 0
	d.mu.Unlock()
	d.log.Info("daemon: session disconnected", "session", e.name, "url", e.url(), "reason", reason)
	if last {
		select {
		case d.idle <- struct{}{}:
		default:
		}
	}
}

// DisconnectAll removes every session; it goes on past failures and
// returns the first.
func (d *Daemon) DisconnectAll(force bool) ([]SessionInfo, error) {
	return d.disconnectAll(force, "disconnect requested")
}

func (d *Daemon) disconnectAll(force bool, reason string) ([]SessionInfo, error) {
	var out []SessionInfo
	var first error
	for _, name := range d.names() {
		info, err := d.disconnect(name, force, reason)
		if err != nil {
			if first == nil {
				first = err
			}
			continue
		}
		out = append(out, info)
	}
	return out, first
}

func (d *Daemon) names() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var names []string
	for n := range d.sessions {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool {
		return d.sessions[names[i]].created.Before(d.sessions[names[j]].created)
	})
	return names
}

// List describes every session, oldest first.
func (d *Daemon) List() []SessionInfo {
	var out []SessionInfo
	for _, n := range d.names() {
		d.mu.Lock()
		e := d.sessions[n]
		d.mu.Unlock()
		if e != nil {
			out = append(out, d.info(e))
		}
	}
	return out
}

// Busy reports whether the daemon has sessions, or connects in progress.
func (d *Daemon) Busy() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.sessions) > 0 || len(d.pending) > 0
}

// Session returns a single-path session by name (nil if none, or if it
// is a multipath session: see Device).
func (d *Daemon) Session(name string) *Session {
	d.mu.Lock()
	defer d.mu.Unlock()
	if e := d.sessions[name]; e != nil {
		return e.sess
	}
	return nil
}

// Device returns the device a session's exports serve by name (nil if
// none): its *Session, or for several URLs its *multipath.Device.
func (d *Daemon) Device(name string) blockdev.Device {
	d.mu.Lock()
	defer d.mu.Unlock()
	if e := d.sessions[name]; e != nil {
		return e.dev
	}
	return nil
}

func (e *entry) exports() []string {
	var out []string
	for _, a := range e.nbdAddrs {
		out = append(out, "nbd "+a)
	}
	if e.fuse != nil {
		out = append(out, "fuse "+e.fuse.Path())
	}
	return out
}

func (d *Daemon) info(e *entry) SessionInfo {
	if e.mp != nil {
		return d.multipathInfo(e)
	}
	st, since := e.sess.State()
	in := e.sess.Info()
	si := SessionInfo{Name: e.name, URL: e.sess.URL(), Protocol: e.scheme, State: st.String(), Since: since,
		Size: in.Size, BlockSize: in.BlockSize, Exports: e.exports(), Stats: e.sess.Stats()}
	if err := e.sess.LastError(); err != nil {
		si.LastError = err.Error()
	}
	return si
}

// Close disconnects every session (forcing busy mounts) and refuses new
// ones.
func (d *Daemon) Close() error {
	d.mu.Lock()
	d.closed = true
	d.mu.Unlock()
	_, err := d.disconnectAll(true, "daemon closing")
	return err
}

// Handle answers one control request.
func (d *Daemon) Handle(ctx context.Context, req *Request) *Response {
	resp := &Response{OK: true, PID: os.Getpid()}
	var err error
	switch req.Op {
	case OpPing:
	case OpList:
		resp.Sessions = d.List()
	case OpConnect:
		var si SessionInfo
		si, err = d.Connect(ctx, *req.Connect)
		if err == nil {
			resp.Sessions = []SessionInfo{si}
		}
	case OpDisconnect:
		if req.All {
			resp.Sessions, err = d.DisconnectAll(req.Force)
		} else {
			var si SessionInfo
			si, err = d.Disconnect(req.Name, req.Force)
			if err == nil {
				resp.Sessions = []SessionInfo{si}
			}
		}
	default:
		err = fmt.Errorf("unknown control operation %q", req.Op)
	}
	if err != nil {
		resp.OK, resp.Error = false, err.Error()
	}
	return resp
}

// ServeControl answers control requests on l until ctx is done or l is
// closed. Each connection carries one request; peers other than root (or
// the daemon's user) are refused.
//
// Shutdown closes l (then ServeControl returns nil once the requests being
// answered are); after Shutdown, ServeControl closes l at once.
func (d *Daemon) ServeControl(ctx context.Context, l *net.UnixListener) error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		l.Close()
		return nil
	}
	d.ctl[l] = struct{}{}
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		delete(d.ctl, l)
		d.mu.Unlock()
	}()
	stop := context.AfterFunc(ctx, func() { l.Close() })
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c, err := l.AcceptUnix()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("control: accepting: %w", err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			d.serveControlConn(ctx, c)
		}()
	}
}

func (d *Daemon) serveControlConn(ctx context.Context, c *net.UnixConn) {
	reply := func(r *Response) {
		b, _ := json.Marshal(r)
		c.SetWriteDeadline(time.Now().Add(10 * time.Second))
		c.Write(append(b, '\n'))
	}
	if err := peerAllowed(c); err != nil {
		d.log.Warn("daemon: control connection refused", "err", err)
		reply(&Response{Error: err.Error()})
		return
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	req, err := DecodeRequest(c)
	if err != nil {
		reply(&Response{Error: err.Error()})
		return
	}
	c.SetReadDeadline(time.Time{})
	reply(d.Handle(ctx, req))
}
