package target

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rdisk/rdisk/internal/units"
)

// The admin socket: HTTP with JSON bodies on a unix socket that only root
// (and the target's own user) may use, so curl works too:
//
//	curl --unix-socket /run/rdisk/admin.sock http://rdisk/v1/status
//
// Every change answers with the Changes it made; errors answer
// {"error": "..."} with 404 for what does not exist and 400 otherwise.

// DefaultAdminSocket is where rdisk target listens for rdisk admin.
const DefaultAdminSocket = "/run/rdisk/admin.sock"

// ResizeRequest is the body of a resize: Size as "2GiB" or a byte count;
// empty re-reads the size of a file or block device grown outside rdisk.
type ResizeRequest struct {
	Size string `json:"size,omitempty"`
}

// HostRequest names a host NQN (or an iSCSI initiator name, an SRP ACL
// entry) to allow.
type HostRequest struct {
	NQN string `json:"nqn"`
}

// SaveResult is the answer of GET /v1/config?format=nvmetcli: the file,
// and what Linux's nvmet cannot restore from it.
type SaveResult struct {
	Config   json.RawMessage `json:"config"`
	Warnings []string        `json:"warnings,omitempty"`
}

// AdminHandler serves the management API of r. reload, if not nil,
// re-reads the configuration file (POST /v1/reload, SIGHUP).
func (r *Running) AdminHandler(reload func() (*Changes, error), log *slog.Logger) http.Handler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	mux := http.NewServeMux()
	// changed wraps a change: it logs what it did.
	changed := func(w http.ResponseWriter, req *http.Request, ch *Changes, err error) {
		if err != nil {
			log.Warn("admin: change refused", "request", req.Method+" "+req.URL.Path, "err", err)
			fail(w, err)
			return
		}
		for _, a := range ch.Applied {
			log.Info("admin: " + a)
		}
		for _, s := range ch.Skipped {
			log.Warn("admin: not applied: " + s)
		}
		reply(w, ch)
	}
	body := func(w http.ResponseWriter, req *http.Request, v any) bool {
		dec := json.NewDecoder(io.LimitReader(req.Body, 1<<20))
		dec.DisallowUnknownFields()
		if err := dec.Decode(v); err != nil {
			fail(w, fmt.Errorf("request body: %w", err))
			return false
		}
		return true
	}
	nsidOf := func(w http.ResponseWriter, req *http.Request) (uint32, bool) {
		n, err := ParseNSID(req.PathValue("nsid"))
		if err != nil {
			fail(w, err)
			return 0, false
		}
		return n, true
	}
	portOf := func(w http.ResponseWriter, req *http.Request) (uint16, bool) {
		n, err := strconv.ParseUint(req.PathValue("id"), 10, 16)
		if err != nil {
			fail(w, fmt.Errorf("port ID %q: want a number", req.PathValue("id")))
			return 0, false
		}
		return uint16(n), true
	}
	lunOf := func(w http.ResponseWriter, req *http.Request) (uint64, bool) {
		n, err := strconv.ParseUint(req.PathValue("lun"), 10, 64)
		if err != nil {
			fail(w, fmt.Errorf("LUN %q: want a number", req.PathValue("lun")))
			return 0, false
		}
		return n, true
	}

	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, req *http.Request) { reply(w, r.Status()) })
	mux.HandleFunc("GET /v1/stats", func(w http.ResponseWriter, req *http.Request) { reply(w, r.IOStats()) })
	mux.HandleFunc("GET /v1/config", func(w http.ResponseWriter, req *http.Request) {
		c := r.Config()
		switch f := req.URL.Query().Get("format"); f {
		case "", "rdisk":
			reply(w, c)
		case "nvmetcli":
			b, warnings, err := c.NvmetcliJSON()
			if err != nil {
				fail(w, err)
				return
			}
			reply(w, SaveResult{Config: b, Warnings: warnings})
		default:
			fail(w, fmt.Errorf("format %q: want rdisk or nvmetcli", f))
		}
	})
	mux.HandleFunc("PUT /v1/config", func(w http.ResponseWriter, req *http.Request) {
		c, err := Parse(io.LimitReader(req.Body, 16<<20))
		if err != nil {
			fail(w, err)
			return
		}
		ch, err := r.Apply(c)
		changed(w, req, ch, err)
	})
	mux.HandleFunc("POST /v1/reload", func(w http.ResponseWriter, req *http.Request) {
		if reload == nil {
			fail(w, errors.New("the target was started from flags, not a configuration file: nothing to reload"))
			return
		}
		ch, err := reload()
		changed(w, req, ch, err)
	})

	mux.HandleFunc("POST /v1/subsystems", func(w http.ResponseWriter, req *http.Request) {
		var s Subsystem
		if body(w, req, &s) {
			ch, err := r.AddSubsystem(s)
			changed(w, req, ch, err)
		}
	})
	mux.HandleFunc("DELETE /v1/subsystems/{nqn}", func(w http.ResponseWriter, req *http.Request) {
		ch, err := r.RemoveSubsystem(req.PathValue("nqn"))
		changed(w, req, ch, err)
	})
	mux.HandleFunc("POST /v1/subsystems/{nqn}/namespaces", func(w http.ResponseWriter, req *http.Request) {
		var ns Namespace
		if body(w, req, &ns) {
			ch, err := r.AddNamespace(req.PathValue("nqn"), ns)
			changed(w, req, ch, err)
		}
	})
	mux.HandleFunc("DELETE /v1/subsystems/{nqn}/namespaces/{nsid}", func(w http.ResponseWriter, req *http.Request) {
		if nsid, ok := nsidOf(w, req); ok {
			ch, err := r.RemoveNamespace(req.PathValue("nqn"), nsid)
			changed(w, req, ch, err)
		}
	})
	mux.HandleFunc("POST /v1/subsystems/{nqn}/namespaces/{nsid}/resize", func(w http.ResponseWriter, req *http.Request) {
		nsid, ok := nsidOf(w, req)
		var rr ResizeRequest
		if !ok || !body(w, req, &rr) {
			return
		}
		var size int64
		if rr.Size != "" {
			var err error
			if size, err = units.ParseSize(rr.Size); err != nil {
				fail(w, fmt.Errorf("size: %w", err))
				return
			}
		}
		ch, err := r.ResizeNamespace(req.PathValue("nqn"), nsid, size)
		changed(w, req, ch, err)
	})
	for _, v := range []struct {
		verb   string
		enable bool
	}{{"enable", true}, {"disable", false}} {
		mux.HandleFunc("POST /v1/subsystems/{nqn}/namespaces/{nsid}/"+v.verb, func(w http.ResponseWriter, req *http.Request) {
			if nsid, ok := nsidOf(w, req); ok {
				ch, err := r.SetNamespaceEnabled(req.PathValue("nqn"), nsid, v.enable)
				changed(w, req, ch, err)
			}
		})
		mux.HandleFunc("POST /v1/ports/{id}/"+v.verb, func(w http.ResponseWriter, req *http.Request) {
			if id, ok := portOf(w, req); ok {
				ch, err := r.SetPortEnabled(id, v.enable)
				changed(w, req, ch, err)
			}
		})
	}
	mux.HandleFunc("POST /v1/subsystems/{nqn}/hosts", func(w http.ResponseWriter, req *http.Request) {
		var h HostRequest
		if body(w, req, &h) {
			ch, err := r.AllowHost(req.PathValue("nqn"), h.NQN)
			changed(w, req, ch, err)
		}
	})
	mux.HandleFunc("DELETE /v1/subsystems/{nqn}/hosts/{host}", func(w http.ResponseWriter, req *http.Request) {
		ch, err := r.DisallowHost(req.PathValue("nqn"), req.PathValue("host"))
		changed(w, req, ch, err)
	})
	mux.HandleFunc("POST /v1/subsystems/{nqn}/allow_any_host/{v}", func(w http.ResponseWriter, req *http.Request) {
		v, err := strconv.ParseBool(req.PathValue("v"))
		if err != nil {
			fail(w, fmt.Errorf("allow_any_host %q: want 1 or 0", req.PathValue("v")))
			return
		}
		ch, err := r.SetAllowAnyHost(req.PathValue("nqn"), v)
		changed(w, req, ch, err)
	})

	mux.HandleFunc("POST /v1/ports", func(w http.ResponseWriter, req *http.Request) {
		var p Port
		if body(w, req, &p) {
			ch, err := r.AddPort(p)
			changed(w, req, ch, err)
		}
	})
	mux.HandleFunc("DELETE /v1/ports/{id}", func(w http.ResponseWriter, req *http.Request) {
		if id, ok := portOf(w, req); ok {
			ch, err := r.RemovePort(id)
			changed(w, req, ch, err)
		}
	})
	mux.HandleFunc("POST /v1/ports/{id}/subsystems/{nqn}", func(w http.ResponseWriter, req *http.Request) {
		if id, ok := portOf(w, req); ok {
			ch, err := r.LinkSubsystem(id, req.PathValue("nqn"))
			changed(w, req, ch, err)
		}
	})
	mux.HandleFunc("DELETE /v1/ports/{id}/subsystems/{nqn}", func(w http.ResponseWriter, req *http.Request) {
		if id, ok := portOf(w, req); ok {
			ch, err := r.UnlinkSubsystem(id, req.PathValue("nqn"))
			changed(w, req, ch, err)
		}
	})

	mux.HandleFunc("POST /v1/iscsi/targets", func(w http.ResponseWriter, req *http.Request) {
		var t ISCSITarget
		if body(w, req, &t) {
			ch, err := r.AddISCSITarget(t)
			changed(w, req, ch, err)
		}
	})
	mux.HandleFunc("DELETE /v1/iscsi/targets/{iqn}", func(w http.ResponseWriter, req *http.Request) {
		ch, err := r.RemoveISCSITarget(req.PathValue("iqn"))
		changed(w, req, ch, err)
	})
	mux.HandleFunc("POST /v1/iscsi/targets/{iqn}/luns", func(w http.ResponseWriter, req *http.Request) {
		var ref LUNRef
		if body(w, req, &ref) {
			ch, err := r.MapISCSILUN(req.PathValue("iqn"), ref)
			changed(w, req, ch, err)
		}
	})
	mux.HandleFunc("DELETE /v1/iscsi/targets/{iqn}/luns/{lun}", func(w http.ResponseWriter, req *http.Request) {
		if lun, ok := lunOf(w, req); ok {
			ch, err := r.UnmapISCSILUN(req.PathValue("iqn"), lun)
			changed(w, req, ch, err)
		}
	})
	mux.HandleFunc("POST /v1/iscsi/targets/{iqn}/initiators", func(w http.ResponseWriter, req *http.Request) {
		var h HostRequest
		if body(w, req, &h) {
			ch, err := r.AllowISCSIInitiator(req.PathValue("iqn"), h.NQN)
			changed(w, req, ch, err)
		}
	})
	mux.HandleFunc("DELETE /v1/iscsi/targets/{iqn}/initiators/{name}", func(w http.ResponseWriter, req *http.Request) {
		ch, err := r.DenyISCSIInitiator(req.PathValue("iqn"), req.PathValue("name"))
		changed(w, req, ch, err)
	})
	mux.HandleFunc("PUT /v1/iscsi/targets/{iqn}/acls/{initiator}", func(w http.ResponseWriter, req *http.Request) {
		var a ISCSIACL
		if body(w, req, &a) {
			if a.Initiator == "" {
				a.Initiator = req.PathValue("initiator")
			}
			if a.Initiator != req.PathValue("initiator") {
				fail(w, fmt.Errorf("the body's initiator %s is not the path's %s", a.Initiator, req.PathValue("initiator")))
				return
			}
			ch, err := r.SetISCSIACL(req.PathValue("iqn"), a)
			changed(w, req, ch, err)
		}
	})
	mux.HandleFunc("DELETE /v1/iscsi/targets/{iqn}/acls/{initiator}", func(w http.ResponseWriter, req *http.Request) {
		ch, err := r.RemoveISCSIACL(req.PathValue("iqn"), req.PathValue("initiator"))
		changed(w, req, ch, err)
	})
	mux.HandleFunc("POST /v1/srp/ports/{port}/initiators", func(w http.ResponseWriter, req *http.Request) {
		var h HostRequest
		if body(w, req, &h) {
			ch, err := r.AllowSRPInitiator(req.PathValue("port"), h.NQN)
			changed(w, req, ch, err)
		}
	})
	mux.HandleFunc("DELETE /v1/srp/ports/{port}/initiators/{name}", func(w http.ResponseWriter, req *http.Request) {
		ch, err := r.DenySRPInitiator(req.PathValue("port"), req.PathValue("name"))
		changed(w, req, ch, err)
	})
	mux.HandleFunc("POST /v1/srp/ports/{port}/luns", func(w http.ResponseWriter, req *http.Request) {
		var ref LUNRef
		if body(w, req, &ref) {
			ch, err := r.MapSRPLUN(req.PathValue("port"), ref)
			changed(w, req, ch, err)
		}
	})
	mux.HandleFunc("DELETE /v1/srp/ports/{port}/luns/{lun}", func(w http.ResponseWriter, req *http.Request) {
		if lun, ok := lunOf(w, req); ok {
			ch, err := r.UnmapSRPLUN(req.PathValue("port"), lun)
			changed(w, req, ch, err)
		}
	})

	closed := func(w http.ResponseWriter, req *http.Request, what string, err error) {
		if err != nil {
			fail(w, err)
			return
		}
		log.Info("admin: closed " + what)
		reply(w, &Changes{Applied: []string{"closed " + what}})
	}
	mux.HandleFunc("DELETE /v1/nvme/controllers/{nqn}/{cntlid}", func(w http.ResponseWriter, req *http.Request) {
		id, err := strconv.ParseUint(req.PathValue("cntlid"), 10, 16)
		if err != nil {
			fail(w, fmt.Errorf("controller ID %q: want a number", req.PathValue("cntlid")))
			return
		}
		closed(w, req, fmt.Sprintf("controller %d of %s", id, req.PathValue("nqn")), r.CloseController(req.PathValue("nqn"), uint16(id)))
	})
	mux.HandleFunc("DELETE /v1/iscsi/sessions/{tsih}", func(w http.ResponseWriter, req *http.Request) {
		id, err := strconv.ParseUint(req.PathValue("tsih"), 10, 16)
		if err != nil {
			fail(w, fmt.Errorf("TSIH %q: want a number", req.PathValue("tsih")))
			return
		}
		closed(w, req, fmt.Sprintf("iscsi session %d", id), r.CloseISCSISession(uint16(id)))
	})
	mux.HandleFunc("DELETE /v1/srp/channels/{id}", func(w http.ResponseWriter, req *http.Request) {
		id, err := strconv.ParseUint(req.PathValue("id"), 10, 64)
		if err != nil {
			fail(w, fmt.Errorf("channel ID %q: want a number", req.PathValue("id")))
			return
		}
		closed(w, req, fmt.Sprintf("srp channel %d", id), r.CloseSRPChannel(id))
	})
	return mux
}

// AdminError is an error answer of the admin socket.
type AdminError struct {
	Error string `json:"error"`
}

func reply(w http.ResponseWriter, v any) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		fail(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(append(b, '\n'))
}

func fail(w http.ResponseWriter, err error) {
	code := http.StatusBadRequest
	if errors.Is(err, ErrNotFound) {
		code = http.StatusNotFound
	}
	b, _ := json.Marshal(AdminError{Error: err.Error()})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	w.Write(append(b, '\n'))
}

// ListenAdmin listens on the unix socket path (its directory is made),
// replacing a stale socket left by a process that is gone; a live one is
// an error. Only root and the process's own user may connect.
func ListenAdmin(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("admin socket %s: %w", path, err)
	}
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return nil, fmt.Errorf("admin socket %s: another rdisk target is listening there", path)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("admin socket %s: exists and is not a socket", path)
		}
		os.Remove(path) // stale
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("admin socket: %w", err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(true)
	// Connecting needs write permission on the socket: owner only. (Until
	// this chmod the umask applies; the peer check below holds anyway.)
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("admin socket %s: %w", path, err)
	}
	return &peerListener{Listener: ln, uid: uint32(os.Getuid())}, nil
}

// peerListener accepts only root and uid (SO_PEERCRED): the socket's mode
// already keeps other users out; this holds if someone loosens it.
type peerListener struct {
	net.Listener
	uid uint32
}

func (l *peerListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		uc, ok := c.(*net.UnixConn)
		if !ok {
			return c, nil
		}
		raw, err := uc.SyscallConn()
		if err != nil {
			c.Close()
			continue
		}
		var cred *unix.Ucred
		var cerr error
		raw.Control(func(fd uintptr) { cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) })
		if cerr != nil || (cred.Uid != 0 && cred.Uid != l.uid) {
			c.Close()
			continue
		}
		return c, nil
	}
}

// ServeAdmin serves h on ln until ctx ends.
func ServeAdmin(ctx context.Context, ln net.Listener, h http.Handler, log *slog.Logger) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Error("admin socket", "err", err)
	}
}

// AdminClient talks to an admin socket.
type AdminClient struct {
	hc *http.Client
}

// NewAdminClient returns a client of the admin socket at path.
func NewAdminClient(path string) *AdminClient {
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		c, err := d.DialContext(ctx, "unix", path)
		if err != nil {
			return nil, fmt.Errorf("admin socket %s (is rdisk target running, and are you root?): %w", path, err)
		}
		return c, nil
	}}
	return &AdminClient{hc: &http.Client{Transport: tr, Timeout: 60 * time.Second}}
}

// Do sends a request (in: a JSON body or nil) and decodes the answer into
// out (unless nil). An error answer becomes an error with its message.
func (a *AdminClient) Do(ctx context.Context, method, path string, in, out any) error {
	var rd io.Reader
	if b, ok := in.([]byte); ok {
		rd = bytes.NewReader(b)
	} else if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://rdisk"+path, rd)
	if err != nil {
		return err
	}
	resp, err := a.hc.Do(req)
	if err != nil {
		var ue interface{ Unwrap() error }
		if errors.As(err, &ue) && ue.Unwrap() != nil {
			err = ue.Unwrap()
		}
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("reading the answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		var e AdminError
		if json.Unmarshal(b, &e) == nil && e.Error != "" {
			return &remoteError{msg: e.Error, notFound: resp.StatusCode == http.StatusNotFound}
		}
		return fmt.Errorf("%s %s: %s", method, path, resp.Status)
	}
	if out == nil {
		return nil
	}
	if raw, ok := out.(*[]byte); ok {
		*raw = b
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("decoding the answer: %w", err)
	}
	return nil
}

// remoteError is an error answer of the admin socket.
type remoteError struct {
	msg      string
	notFound bool
}

func (e *remoteError) Error() string { return e.msg }

func (e *remoteError) Is(target error) bool { return e.notFound && target == ErrNotFound }
