package initiator

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/rdisk/rdisk/initiator/multipath"
	"golang.org/x/sys/unix"
)

// The control protocol: the CLI connects to the daemon's unix socket,
// writes one Request as a JSON line and reads one Response as a JSON
// line. The socket is root-only (mode 0600, and the daemon checks the
// peer's credentials).

// Control operations.
const (
	OpPing       = "ping"
	OpConnect    = "connect"
	OpList       = "list"
	OpDisconnect = "disconnect"
)

// MaxControlMessage bounds a request or response line.
const MaxControlMessage = 1 << 20

// Request is one control request.
type Request struct {
	Op string `json:"op"`
	// Connect is the session to add (OpConnect).
	Connect *ConnectSpec `json:"connect,omitempty"`
	// Name is the session to disconnect; All disconnects every session.
	Name string `json:"name,omitempty"`
	All  bool   `json:"all,omitempty"`
	// Force detaches busy FUSE mounts lazily instead of failing.
	Force bool `json:"force,omitempty"`
}

// ConnectSpec describes a session and its exports.
type ConnectSpec struct {
	// URL names the remote disk.
	URL string `json:"url"`
	// URLs name several paths to one disk (gateways exporting it, or one
	// target's ports): the session is then a multipath device over a
	// fail-fast session per URL (package initiator/multipath). URL, when
	// set too, is the first path.
	URLs []string `json:"urls,omitempty"`
	// Policy is the multipath path selection: "round-robin" (default) or
	// "queue-depth".
	Policy string `json:"policy,omitempty"`
	// Name names the session (and the FUSE file); empty picks "diskN".
	Name string `json:"name,omitempty"`
	// NBD lists NBD listen addresses: "unix:/path" or "tcp:HOST:PORT"
	// (loopback only: NBD has no authentication).
	NBD []string `json:"nbd,omitempty"`
	// FUSE is a directory to mount the disk file NAME in.
	FUSE     string `json:"fuse,omitempty"`
	ReadOnly bool   `json:"read_only,omitempty"`
	// LossTimeoutMS and ReconnectDelayMS override the daemon's defaults
	// (0: default; a negative loss timeout waits forever).
	LossTimeoutMS    int64 `json:"loss_timeout_ms,omitempty"`
	ReconnectDelayMS int64 `json:"reconnect_delay_ms,omitempty"`
}

// Response answers a Request.
type Response struct {
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
	// Sessions: the session made (OpConnect), all sessions (OpList), the
	// sessions disconnected (OpDisconnect).
	Sessions []SessionInfo `json:"sessions,omitempty"`
	// PID is the daemon's process ID.
	PID int `json:"pid,omitempty"`
}

// SessionInfo describes a session for `rdisk list`.
type SessionInfo struct {
	Name string `json:"name"`
	// URL is the session's URL, a multipath session's first path's.
	URL string `json:"url"`
	// URLs are a multipath session's paths; Policy its path selection.
	URLs      []string  `json:"urls,omitempty"`
	Policy    string    `json:"policy,omitempty"`
	Protocol  string    `json:"protocol"`
	State     string    `json:"state"`
	Since     time.Time `json:"since"`
	Size      int64     `json:"size"`
	BlockSize int       `json:"block_size"`
	// Exports are "nbd unix:/path", "nbd tcp:127.0.0.1:10809" and
	// "fuse /dir/NAME".
	Exports   []string `json:"exports"`
	LastError string   `json:"last_error,omitempty"`
	// Stats of a multipath session count the requests of the device
	// (Retries: the requests failed over to another path; Reconnects:
	// the paths' reconnections).
	Stats Stats `json:"stats"`
	// Paths describe a multipath session's paths.
	Paths []PathStatus `json:"paths,omitempty"`
}

// PathStatus describes one path of a multipath session.
type PathStatus struct {
	URL string `json:"url"`
	// State is the path's state in the multipath device: "live" (serving
	// by its access state), "pending" (refused I/O; its access state is
	// being re-read), "down" (connection lost), "failed" (gone for good),
	// or "connecting" (its first connection is being retried).
	State string `json:"state"`
	// Connection is the path session's state: "live", "reconnecting",
	// "failed", "closed" (empty while connecting).
	Connection string `json:"connection,omitempty"`
	// Access is the ANA/ALUA access state: "optimized", "non-optimized",
	// "inaccessible", "persistent-loss", "transitioning" or "unknown".
	Access string `json:"access"`
	// InFlight, Completed, Errors and Failovers are the multipath
	// device's counts for the path (Failovers: its requests sent to
	// another path); Reconnects the session's.
	InFlight   int       `json:"in_flight"`
	Completed  uint64    `json:"completed"`
	Errors     uint64    `json:"errors"`
	Failovers  uint64    `json:"failovers"`
	Reconnects uint64    `json:"reconnects"`
	Since      time.Time `json:"since"`
	LastError  string    `json:"last_error,omitempty"`
}

// DecodeRequest reads and validates one request line.
func DecodeRequest(r io.Reader) (*Request, error) {
	line, err := readLine(r)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	var req Request
	if err := dec.Decode(&req); err != nil {
		return nil, fmt.Errorf("control request: %w", err)
	}
	if dec.More() {
		return nil, errors.New("control request: trailing data")
	}
	if err := req.Validate(); err != nil {
		return nil, err
	}
	return &req, nil
}

// readLine reads up to a newline (or EOF), at most MaxControlMessage bytes.
func readLine(r io.Reader) ([]byte, error) {
	br := bufio.NewReaderSize(io.LimitReader(r, MaxControlMessage+1), 4096)
	line, err := br.ReadBytes('\n')
	if err != nil && !(errors.Is(err, io.EOF) && len(line) > 0) {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("control: empty message")
		}
		return nil, fmt.Errorf("control: reading: %w", err)
	}
	if len(line) > MaxControlMessage {
		return nil, fmt.Errorf("control: message longer than %d bytes", MaxControlMessage)
	}
	return line, nil
}

// Validate checks a request's fields.
func (r *Request) Validate() error {
	switch r.Op {
	case OpPing, OpList:
	case OpConnect:
		if r.Connect == nil {
			return errors.New("connect request without a session")
		}
		return r.Connect.Validate()
	case OpDisconnect:
		if r.All == (r.Name != "") {
			return errors.New("disconnect: name a session or ask for all, not both")
		}
		if r.Name != "" {
			return CheckName(r.Name)
		}
	default:
		return fmt.Errorf("unknown control operation %q", r.Op)
	}
	return nil
}

// MaxPaths bounds the URLs of one session.
const MaxPaths = 16

// PathURLs returns the session's paths: URL, then URLs.
func (c *ConnectSpec) PathURLs() []string {
	if c.URL == "" {
		return c.URLs
	}
	return append([]string{c.URL}, c.URLs...)
}

// Validate checks a ConnectSpec.
func (c *ConnectSpec) Validate() error {
	urls := c.PathURLs()
	if len(urls) == 0 {
		urls = []string{""}
	}
	if len(urls) > MaxPaths {
		return fmt.Errorf("%d URLs: at most %d paths", len(urls), MaxPaths)
	}
	for i, u := range urls {
		if u == "" || len(u) > 4096 || !IsURL(u) {
			return fmt.Errorf("%q is not a URL (want SCHEME://HOST/..., e.g. nvme://127.0.0.1:4420/NQN)", truncate(u))
		}
		for _, o := range urls[:i] {
			if o == u {
				return fmt.Errorf("URL %q given twice", truncate(u))
			}
		}
	}
	if _, err := multipath.ParsePolicy(c.Policy); err != nil {
		return err
	}
	if c.Name != "" {
		if err := CheckName(c.Name); err != nil {
			return err
		}
	}
	if len(c.NBD) > 16 {
		return errors.New("more than 16 NBD addresses")
	}
	for _, a := range c.NBD {
		if _, _, err := ParseNBDAddr(a); err != nil {
			return err
		}
	}
	if c.FUSE != "" && (!filepath.IsAbs(c.FUSE) || len(c.FUSE) > 4096 || strings.ContainsRune(c.FUSE, 0)) {
		return fmt.Errorf("FUSE directory %q: want an absolute path", truncate(c.FUSE))
	}
	const day = int64(24 * time.Hour / time.Millisecond)
	if c.LossTimeoutMS > 365*day || c.ReconnectDelayMS < 0 || c.ReconnectDelayMS > day {
		return errors.New("loss timeout or reconnect delay out of range")
	}
	return nil
}

// CheckName checks a session name: 1 to 64 characters of letters, digits,
// '.', '_' and '-', not starting with '.' or '-'.
func CheckName(name string) error {
	if name == "" || len(name) > 64 {
		return fmt.Errorf("session name %q: want 1 to 64 characters", truncate(name))
	}
	for i, c := range name {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' ||
			i > 0 && (c == '.' || c == '-')
		if !ok {
			return fmt.Errorf("session name %q: use letters, digits, '_', '.' and '-' (not first)", truncate(name))
		}
	}
	return nil
}

// ParseNBDAddr parses an NBD listen address: "unix:/abs/path" or
// "tcp:HOST:PORT" with a loopback HOST (NBD has no authentication).
func ParseNBDAddr(s string) (network, addr string, err error) {
	network, addr, ok := strings.Cut(s, ":")
	switch {
	case !ok:
	case network == "unix":
		if !filepath.IsAbs(addr) || len(addr) > 107 || strings.ContainsRune(addr, 0) {
			return "", "", fmt.Errorf("NBD address %q: want unix:/ABSOLUTE/PATH (at most 107 bytes)", truncate(s))
		}
		return network, addr, nil
	case network == "tcp":
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return "", "", fmt.Errorf("NBD address %q: want tcp:127.0.0.1:PORT", truncate(s))
		}
		if _, err := net.LookupPort("tcp", port); err != nil {
			return "", "", fmt.Errorf("NBD address %q: bad port %q", truncate(s), port)
		}
		ip := net.ParseIP(host)
		if host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			return "", "", fmt.Errorf("NBD address %q: only loopback addresses (NBD has no authentication; use 127.0.0.1)", truncate(s))
		}
		return network, addr, nil
	}
	return "", "", fmt.Errorf("NBD address %q: want unix:/PATH or tcp:127.0.0.1:PORT", truncate(s))
}

func truncate(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}

// ListenControl listens on the control socket at path: its directory is
// created (mode 0700) when missing, a stale socket nobody answers on is
// replaced, and the socket is made root-only (0600).
func ListenControl(path string) (*net.UnixListener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("control socket directory: %w", err)
	}
	if st, err := os.Lstat(path); err == nil {
		if st.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("control socket %s exists and is not a socket", path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("control socket %s: a daemon is already running", path)
		}
		os.Remove(path)
	}
	old := syscall.Umask(0o177)
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	syscall.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, fmt.Errorf("control socket: %w", err)
	}
	return l, nil
}

// peerAllowed checks the credentials of a control connection: root, or
// the daemon's own user.
func peerAllowed(c *net.UnixConn) error {
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return err
	}
	if cerr != nil {
		return cerr
	}
	if cred.Uid != 0 && int(cred.Uid) != os.Geteuid() {
		return fmt.Errorf("control: uid %d is not allowed (root only)", cred.Uid)
	}
	return nil
}

// Call sends one request to the daemon at path and returns its response.
// A daemon-side failure comes back as an error with the daemon's message.
func Call(ctx context.Context, path string, req *Request) (*Response, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Now()) })
	defer stop()
	b, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	if _, err := c.Write(append(b, '\n')); err != nil {
		return nil, fmt.Errorf("control: sending: %w", err)
	}
	line, err := readLine(c)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	var resp Response
	if err := json.Unmarshal(line, &resp); err != nil {
		return nil, fmt.Errorf("control: bad response: %w", err)
	}
	if !resp.OK {
		return &resp, errors.New(resp.Error)
	}
	return &resp, nil
}
