package initiator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/rdisk/rdisk/blockdev"
	"github.com/rdisk/rdisk/initiator/multipath"
)

// connectMultipath makes e a multipath session over a fail-fast session
// per URL. The paths connect at once; the connect succeeds when one of them
// does, and the others are retried in the background (every reconnect
// delay, until the session is disconnected) and join when they connect.
func (d *Daemon) connectMultipath(ctx context.Context, e *entry, spec ConnectSpec, urls []string, dials []Dialer, cfg SessionConfig) error {
	policy, err := multipath.ParsePolicy(spec.Policy)
	if err != nil {
		return err
	}
	lossTimeout := cfg.LossTimeout
	if cfg.ReconnectDelay <= 0 {
		cfg.ReconnectDelay = DefaultReconnectDelay
	}
	e.urls, e.policy = urls, policy.String()
	e.paths, e.connecting = map[string]*Session{}, map[string]error{}
	pcfg := func(i int) SessionConfig {
		return pathSession(cfg, urls[i], dials[i], d.log.With("session", e.name, "path", urls[i]))
	}
	cfgs := make([]SessionConfig, len(urls))
	for i := range urls {
		cfgs[i] = pcfg(i)
	}
	sessions, errs := connectPaths(ctx, cfgs)
	var paths []multipath.Path
	var failed []error
	for i, s := range sessions {
		if s != nil {
			paths = append(paths, multipath.Path{Name: urls[i], Dev: s})
			e.paths[urls[i]] = s
		} else {
			failed = append(failed, fmt.Errorf("%s: %w", urls[i], errs[i]))
			e.connecting[urls[i]] = errs[i]
		}
	}
	if len(paths) == 0 {
		return fmt.Errorf("connecting to %s: no path connected: %w", e.name, errors.Join(failed...))
	}
	recheck := d.cfg.RecheckInterval
	if recheck <= 0 {
		recheck = cfg.ReconnectDelay
	}
	mp, err := multipath.New(multipath.Config{Name: e.name, Paths: paths, Policy: policy, LossTimeout: lossTimeout,
		RecheckInterval: recheck, Logger: d.log.With("session", e.name)})
	if err != nil {
		return fmt.Errorf("connecting to %s: %w", e.name, err) // New closed the sessions
	}
	e.mp, e.dev = mp, mp
	actx, cancel := context.WithCancel(context.Background())
	e.stopAdders = cancel
	for i, u := range urls {
		if sessions[i] == nil {
			d.log.Warn("daemon: a path did not connect; retrying in the background", "session", e.name, "path", u, "err", errs[i])
			e.adders.Add(1)
			go d.addPathLater(actx, e, pcfg(i))
		}
	}
	return nil
}

// pathSession is the configuration of a path session of a multipath
// device: fail-fast, and reconnecting for as long as it lives (multipathd's
// path checker): the multipath device bounds how long I/O waits.
func pathSession(base SessionConfig, url string, dial Dialer, log *slog.Logger) SessionConfig {
	c := base
	c.URL, c.Dial, c.FailFast, c.LossTimeout, c.Logger = url, dial, true, -1, log
	return c
}

// connectPaths makes the sessions at once; a nil session has its error.
func connectPaths(ctx context.Context, cfgs []SessionConfig) ([]*Session, []error) {
	sessions := make([]*Session, len(cfgs))
	errs := make([]error, len(cfgs))
	var wg sync.WaitGroup
	for i := range cfgs {
		wg.Go(func() { sessions[i], errs[i] = NewSession(ctx, cfgs[i]) })
	}
	wg.Wait()
	return sessions, errs
}

// MultipathConfig describes a multipath device for tools that open a disk
// without the daemon (`rdisk bench`, `rdisk cp`): a fail-fast session per
// URL under a multipath.Device. Zero durations take the defaults of
// SessionConfig and multipath.Config.
type MultipathConfig struct {
	// Name is the device's name [the first URL].
	Name string
	URLs []string
	// Dialers open the URLs by scheme.
	Dialers Dialers
	Policy  multipath.Policy
	// LossTimeout bounds how long I/O waits while no path is usable
	// [60 s]; negative waits forever.
	LossTimeout time.Duration
	// ReconnectDelay and ConnectTimeout are the path sessions' (which
	// reconnect for as long as the device lives).
	ReconnectDelay, ConnectTimeout time.Duration
	// RecheckInterval is how often unusable paths' states are re-read
	// [the reconnect delay].
	RecheckInterval time.Duration
	Logger          *slog.Logger
}

// DialMultipath connects every URL at once, each as a fail-fast session,
// and returns a multipath device over them. It fails, closing what it
// opened, when a URL does not connect or the paths reach different disks
// (a tool wants every path it names; the daemon instead retries a path that
// does not connect).
func DialMultipath(ctx context.Context, cfg MultipathConfig) (*multipath.Device, error) {
	if len(cfg.URLs) == 0 {
		return nil, errors.New("initiator: multipath without URLs")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.ReconnectDelay <= 0 {
		cfg.ReconnectDelay = DefaultReconnectDelay
	}
	base := SessionConfig{ReconnectDelay: cfg.ReconnectDelay, ConnectTimeout: cfg.ConnectTimeout}
	cfgs := make([]SessionConfig, len(cfg.URLs))
	for i, u := range cfg.URLs {
		dial, _, err := cfg.Dialers.Lookup(u)
		if err != nil {
			return nil, err
		}
		cfgs[i] = pathSession(base, u, dial, cfg.Logger.With("path", u))
	}
	sessions, errs := connectPaths(ctx, cfgs)
	var paths []multipath.Path
	var failed []error
	for i, s := range sessions {
		if s == nil {
			failed = append(failed, fmt.Errorf("connecting to %s: %w", cfg.URLs[i], errs[i]))
			continue
		}
		paths = append(paths, multipath.Path{Name: cfg.URLs[i], Dev: s})
	}
	if len(failed) > 0 {
		for _, p := range paths {
			p.Dev.Close()
		}
		return nil, errors.Join(failed...)
	}
	recheck := cfg.RecheckInterval
	if recheck <= 0 {
		recheck = cfg.ReconnectDelay
	}
	return multipath.New(multipath.Config{Name: cfg.Name, Paths: paths, Policy: cfg.Policy, LossTimeout: cfg.LossTimeout,
		RecheckInterval: recheck, Logger: cfg.Logger})
}

// addPathLater connects a path whose first connection failed, every
// reconnect delay until it does or ctx ends, and adds it to e's multipath
// device. A path to another disk is refused, and not tried again.
func (d *Daemon) addPathLater(ctx context.Context, e *entry, cfg SessionConfig) {
	defer e.adders.Done()
	t := time.NewTimer(cfg.ReconnectDelay)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s, err := NewSession(ctx, cfg)
		if err == nil {
			if err = e.mp.AddPath(multipath.Path{Name: cfg.URL, Dev: s}); err == nil {
				e.pathsMu.Lock()
				e.paths[cfg.URL] = s
				delete(e.connecting, cfg.URL)
				e.pathsMu.Unlock()
				d.log.Info("daemon: path connected", "session", e.name, "path", cfg.URL)
				return
			}
			s.Close()
			d.log.Error("daemon: path refused; not retrying it", "session", e.name, "path", cfg.URL, "err", err)
			e.pathsMu.Lock()
			e.connecting[cfg.URL] = err
			e.pathsMu.Unlock()
			return
		}
		if ctx.Err() != nil {
			return
		}
		e.pathsMu.Lock()
		e.connecting[cfg.URL] = err
		e.pathsMu.Unlock()
		t.Reset(cfg.ReconnectDelay)
	}
}

// url names the session in logs: its URL, or its paths' URLs.
func (e *entry) url() string {
	if e.sess != nil {
		return e.sess.URL()
	}
	return strings.Join(e.urls, " ")
}

// pathURLs are the session's URLs.
func (e *entry) pathURLs() []string {
	if e.sess != nil {
		return []string{e.sess.URL()}
	}
	return e.urls
}

// State names of a multipath session in SessionInfo.State.
const (
	// stateDegraded: some paths do not serve I/O.
	stateDegraded = "degraded"
)

// multipathInfo describes a multipath session: "live" when every path
// serves I/O, "degraded" when some do, "reconnecting" when none does (I/O
// waits), "failed" when I/O fails for want of a path.
func (d *Daemon) multipathInfo(e *entry) SessionInfo {
	in := e.mp.Info()
	mst := e.mp.Stats()
	si := SessionInfo{Name: e.name, URL: e.urls[0], URLs: e.urls, Policy: e.policy, Protocol: e.scheme,
		Size: in.Size, BlockSize: in.BlockSize, Exports: e.exports(), Since: e.created,
		Stats: Stats{Reads: mst.Reads, Writes: mst.Writes, Flushes: mst.Flushes, Discards: mst.Discards, WriteZeroes: mst.WriteZeroes,
			BytesRead: mst.BytesRead, BytesWritten: mst.BytesWritten, Errors: mst.Errors, Retries: mst.Failovers, InFlight: mst.InFlight}}
	byName := map[string]multipath.PathInfo{}
	for _, p := range e.mp.Paths() {
		byName[p.Name] = p
	}
	e.pathsMu.Lock()
	usable := 0
	for _, u := range e.urls {
		ps := PathStatus{URL: u}
		s := e.paths[u]
		p, ok := byName[u]
		switch {
		case s != nil && ok:
			st, since := s.State()
			ss := s.Stats()
			ps.State, ps.Connection, ps.Access = p.State, st.String(), p.Access.String()
			ps.InFlight, ps.Completed, ps.Errors, ps.Failovers = p.InFlight, p.Completed, p.Errors, p.Failovers
			ps.Reconnects, ps.Since = ss.Reconnects, p.Changed
			if since.After(ps.Since) {
				ps.Since = since
			}
			if err := s.LastError(); err != nil {
				ps.LastError = err.Error()
			}
			si.Stats.Reconnects += ss.Reconnects
			if p.State == "live" && p.Access.Usable() {
				usable++
			}
		default:
			ps.State, ps.Access = "connecting", blockdev.AccessUnknown.String()
			if err := e.connecting[u]; err != nil {
				ps.LastError = err.Error()
			}
		}
		if ps.Since.After(si.Since) {
			si.Since = ps.Since
		}
		si.Paths = append(si.Paths, ps)
	}
	e.pathsMu.Unlock()
	switch {
	case e.mp.Failing():
		si.State = StateFailed.String()
	case usable == 0:
		si.State = StateReconnecting.String()
	case usable < len(e.urls):
		si.State = stateDegraded
	default:
		si.State = StateLive.String()
	}
	if err := e.mp.LastError(); err != nil {
		si.LastError = err.Error()
	}
	return si
}

// reconnects sums the reconnections of a multipath session's paths.
func (e *entry) reconnects() uint64 {
	e.pathsMu.Lock()
	defer e.pathsMu.Unlock()
	var n uint64
	for _, s := range e.paths {
		n += s.Stats().Reconnects
	}
	return n
}
