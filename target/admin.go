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
	// change registers a route that changes the model: do reads the
	// request (path values, body) and makes the change; what it did is
	// logged and answered.
	change := func(pattern string, do func(req *http.Request) (*Changes, error)) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, req *http.Request) {
			ch, err := do(req)
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
		})
	}
	nqn := func(req *http.Request) string { return req.PathValue("nqn") }

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
	change("PUT /v1/config", func(req *http.Request) (*Changes, error) {
		c, err := Parse(io.LimitReader(req.Body, 16<<20))
		if err != nil {
			return nil, err
		}
		return r.Apply(c)
	})
	change("POST /v1/reload", func(req *http.Request) (*Changes, error) {
		if reload == nil {
			return nil, errors.New("the target was started from flags, not a configuration file: nothing to reload")
		}
		return reload()
	})

	change("POST /v1/subsystems", withBody(func(_ *http.Request, s Subsystem) (*Changes, error) { return r.AddSubsystem(s) }))
	change("DELETE /v1/subsystems/{nqn}", func(req *http.Request) (*Changes, error) { return r.RemoveSubsystem(nqn(req)) })
	change("POST /v1/subsystems/{nqn}/namespaces", withBody(func(req *http.Request, ns Namespace) (*Changes, error) {
		return r.AddNamespace(nqn(req), ns)
	}))
	change("DELETE /v1/subsystems/{nqn}/namespaces/{nsid}", withNSID(r.RemoveNamespace))
	change("POST /v1/subsystems/{nqn}/namespaces/{nsid}/resize", withBody(func(req *http.Request, rr ResizeRequest) (*Changes, error) {
		var size int64
		if rr.Size != "" {
			var err error
			if size, err = units.ParseSize(rr.Size); err != nil {
				return nil, fmt.Errorf("size: %w", err)
			}
		}
		return withNSID(func(nqn string, nsid uint32) (*Changes, error) { return r.ResizeNamespace(nqn, nsid, size) })(req)
	}))
	for _, v := range []struct {
		verb   string
		enable bool
	}{{"enable", true}, {"disable", false}} {
		change("POST /v1/subsystems/{nqn}/namespaces/{nsid}/"+v.verb, withNSID(func(nqn string, nsid uint32) (*Changes, error) {
			return r.SetNamespaceEnabled(nqn, nsid, v.enable)
		}))
		change("POST /v1/ports/{id}/"+v.verb, withPort(func(_ *http.Request, id uint16) (*Changes, error) { return r.SetPortEnabled(id, v.enable) }))
	}
	change("POST /v1/subsystems/{nqn}/hosts", withBody(func(req *http.Request, h HostRequest) (*Changes, error) {
		return r.AllowHost(nqn(req), h.NQN)
	}))
	change("DELETE /v1/subsystems/{nqn}/hosts/{host}", func(req *http.Request) (*Changes, error) {
		return r.DisallowHost(nqn(req), req.PathValue("host"))
	})
	change("POST /v1/subsystems/{nqn}/allow_any_host/{v}", func(req *http.Request) (*Changes, error) {
		v, err := strconv.ParseBool(req.PathValue("v"))
		if err != nil {
			return nil, fmt.Errorf("allow_any_host %q: want 1 or 0", req.PathValue("v"))
		}
		return r.SetAllowAnyHost(nqn(req), v)
	})

	change("POST /v1/ports", withBody(func(_ *http.Request, p Port) (*Changes, error) { return r.AddPort(p) }))
	change("DELETE /v1/ports/{id}", withPort(func(_ *http.Request, id uint16) (*Changes, error) { return r.RemovePort(id) }))
	change("POST /v1/ports/{id}/subsystems/{nqn}", withPort(func(req *http.Request, id uint16) (*Changes, error) {
		return r.LinkSubsystem(id, nqn(req))
	}))
	change("DELETE /v1/ports/{id}/subsystems/{nqn}", withPort(func(req *http.Request, id uint16) (*Changes, error) {
		return r.UnlinkSubsystem(id, nqn(req))
	}))

	grp := func(req *http.Request) (uint32, error) {
		g, err := pathNumber(req, "grpid", "ANA group", 32)
		return uint32(g), err
	}
	change("PUT /v1/ports/{id}/ana_groups/{grpid}", withBody(func(req *http.Request, s StateRequest) (*Changes, error) {
		return withPort(func(req *http.Request, id uint16) (*Changes, error) {
			g, err := grp(req)
			if err != nil {
				return nil, err
			}
			return r.SetANAState(id, g, s.State)
		})(req)
	}))
	change("DELETE /v1/ports/{id}/ana_groups/{grpid}", withPort(func(req *http.Request, id uint16) (*Changes, error) {
		g, err := grp(req)
		if err != nil {
			return nil, err
		}
		return r.RemoveANAGroup(id, g)
	}))
	change("PUT /v1/subsystems/{nqn}/namespaces/{nsid}/ana_group", withBody(func(req *http.Request, g GroupRequest) (*Changes, error) {
		return withNSID(func(nqn string, nsid uint32) (*Changes, error) { return r.SetNamespaceANAGroup(nqn, nsid, g.GrpID) })(req)
	}))
	for _, tr := range []string{"iscsi", "srp"} {
		change("PUT /v1/"+tr+"/port_groups/{pg}", withBody(func(req *http.Request, s StateRequest) (*Changes, error) {
			id, err := pathNumber(req, "pg", "port group", 16)
			if err != nil {
				return nil, err
			}
			return r.SetPortGroupState(tr, uint16(id), s.State)
		}))
	}
	change("PUT /v1/gateway/state", withBody(func(_ *http.Request, s StateRequest) (*Changes, error) { return r.SetGatewayState(s.State) }))

	iqn := func(req *http.Request) string { return req.PathValue("iqn") }
	change("POST /v1/iscsi/targets", withBody(func(_ *http.Request, t ISCSITarget) (*Changes, error) { return r.AddISCSITarget(t) }))
	change("DELETE /v1/iscsi/targets/{iqn}", func(req *http.Request) (*Changes, error) { return r.RemoveISCSITarget(iqn(req)) })
	change("POST /v1/iscsi/targets/{iqn}/luns", withBody(func(req *http.Request, ref LUNRef) (*Changes, error) {
		return r.MapISCSILUN(iqn(req), ref)
	}))
	change("DELETE /v1/iscsi/targets/{iqn}/luns/{lun}", withLUN(func(req *http.Request, lun uint64) (*Changes, error) {
		return r.UnmapISCSILUN(iqn(req), lun)
	}))
	change("POST /v1/iscsi/targets/{iqn}/initiators", withBody(func(req *http.Request, h HostRequest) (*Changes, error) {
		return r.AllowISCSIInitiator(iqn(req), h.NQN)
	}))
	change("DELETE /v1/iscsi/targets/{iqn}/initiators/{name}", func(req *http.Request) (*Changes, error) {
		return r.DenyISCSIInitiator(iqn(req), req.PathValue("name"))
	})
	change("PUT /v1/iscsi/targets/{iqn}/acls/{initiator}", withBody(func(req *http.Request, a ISCSIACL) (*Changes, error) {
		if a.Initiator == "" {
			a.Initiator = req.PathValue("initiator")
		}
		if a.Initiator != req.PathValue("initiator") {
			return nil, fmt.Errorf("the body's initiator %s is not the path's %s", a.Initiator, req.PathValue("initiator"))
		}
		return r.SetISCSIACL(iqn(req), a)
	}))
	change("DELETE /v1/iscsi/targets/{iqn}/acls/{initiator}", func(req *http.Request) (*Changes, error) {
		return r.RemoveISCSIACL(iqn(req), req.PathValue("initiator"))
	})
	port := func(req *http.Request) string { return req.PathValue("port") }
	change("POST /v1/srp/ports/{port}/initiators", withBody(func(req *http.Request, h HostRequest) (*Changes, error) {
		return r.AllowSRPInitiator(port(req), h.NQN)
	}))
	change("DELETE /v1/srp/ports/{port}/initiators/{name}", func(req *http.Request) (*Changes, error) {
		return r.DenySRPInitiator(port(req), req.PathValue("name"))
	})
	change("POST /v1/srp/ports/{port}/luns", withBody(func(req *http.Request, ref LUNRef) (*Changes, error) {
		return r.MapSRPLUN(port(req), ref)
	}))
	change("DELETE /v1/srp/ports/{port}/luns/{lun}", withLUN(func(req *http.Request, lun uint64) (*Changes, error) {
		return r.UnmapSRPLUN(port(req), lun)
	}))

	closed := func(what string, err error) (*Changes, error) {
		if err != nil {
			return nil, err
		}
		return &Changes{Applied: []string{"closed " + what}}, nil
	}
	change("DELETE /v1/nvme/controllers/{nqn}/{cntlid}", func(req *http.Request) (*Changes, error) {
		id, err := pathNumber(req, "cntlid", "controller ID", 16)
		if err != nil {
			return nil, err
		}
		return closed(fmt.Sprintf("controller %d of %s", id, nqn(req)), r.CloseController(nqn(req), uint16(id)))
	})
	change("DELETE /v1/iscsi/sessions/{tsih}", func(req *http.Request) (*Changes, error) {
		id, err := pathNumber(req, "tsih", "TSIH", 16)
		if err != nil {
			return nil, err
		}
		return closed(fmt.Sprintf("iscsi session %d", id), r.CloseISCSISession(uint16(id)))
	})
	change("DELETE /v1/srp/channels/{id}", func(req *http.Request) (*Changes, error) {
		id, err := pathNumber(req, "id", "channel ID", 64)
		if err != nil {
			return nil, err
		}
		return closed(fmt.Sprintf("srp channel %d", id), r.CloseSRPChannel(id))
	})
	return mux
}

// withBody decodes a request's JSON body (unknown fields refused) into a
// T for do.
func withBody[T any](do func(req *http.Request, v T) (*Changes, error)) func(*http.Request) (*Changes, error) {
	return func(req *http.Request) (*Changes, error) {
		var v T
		dec := json.NewDecoder(io.LimitReader(req.Body, 1<<20))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&v); err != nil {
			return nil, fmt.Errorf("request body: %w", err)
		}
		return do(req, v)
	}
}

// withNSID reads the {nqn} and {nsid} path values for do.
func withNSID(do func(nqn string, nsid uint32) (*Changes, error)) func(*http.Request) (*Changes, error) {
	return func(req *http.Request) (*Changes, error) {
		n, err := ParseNSID(req.PathValue("nsid"))
		if err != nil {
			return nil, err
		}
		return do(req.PathValue("nqn"), n)
	}
}

// withPort reads the {id} path value, a port ID, for do.
func withPort(do func(req *http.Request, id uint16) (*Changes, error)) func(*http.Request) (*Changes, error) {
	return func(req *http.Request) (*Changes, error) {
		n, err := pathNumber(req, "id", "port ID", 16)
		if err != nil {
			return nil, err
		}
		return do(req, uint16(n))
	}
}

// withLUN reads the {lun} path value for do.
func withLUN(do func(req *http.Request, lun uint64) (*Changes, error)) func(*http.Request) (*Changes, error) {
	return func(req *http.Request) (*Changes, error) {
		n, err := pathNumber(req, "lun", "LUN", 64)
		if err != nil {
			return nil, err
		}
		return do(req, n)
	}
}

// pathNumber reads the path value key as an unsigned number of bits bits;
// what names it in the error.
func pathNumber(req *http.Request, key, what string, bits int) (uint64, error) {
	n, err := strconv.ParseUint(req.PathValue(key), 10, bits)
	if err != nil {
		return 0, fmt.Errorf("%s %q: want a number", what, req.PathValue(key))
	}
	return n, nil
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
