package multipath

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/rdisk/rdisk/blockdev"
)

// pathState is the multipath layer's view of a path; its access state is
// the device's.
type pathState uint32

const (
	// stLive: selected by its access state.
	stLive pathState = iota + 1
	// stPending: refused a request with ErrPath; its access state is being
	// re-read (or, without a PathReporter, it is tried again after
	// RecheckInterval).
	stPending
	// stDown: its connection failed; its access state is re-read every
	// RecheckInterval until it is usable.
	stDown
	// stFailed: its connection failed and it cannot tell when it is back
	// (no PathReporter): gone for good.
	stFailed
	// stRemoved: RemovePath took it.
	stRemoved
)

func (s pathState) String() string {
	switch s {
	case stLive:
		return "live"
	case stPending:
		return "pending"
	case stDown:
		return "down"
	case stFailed:
		return "failed"
	case stRemoved:
		return "removed"
	}
	return fmt.Sprintf("pathState(%d)", uint32(s))
}

// Access classes, best first.
const (
	classOptimized = iota
	classNonOptimized
	classUnusable
)

type path struct {
	name string
	id   int // index of the path's buffers in mpBuffers
	dev  blockdev.Device
	rep  blockdev.PathReporter
	reg  BufferRegistrar

	state       atomic.Uint32
	changed     atomic.Int64 // unix nanoseconds of the last state change
	lastRefresh atomic.Int64
	refreshing  atomic.Bool
	lastAccess  atomic.Uint32 // the access state last logged
	inflight    atomic.Int64
	dirty       atomic.Bool // completed writes since its last flush
	completed   atomic.Uint64
	errs        atomic.Uint64
	failovers   atomic.Uint64
}

func (d *Device) newPath(pc Path) *path {
	p := &path{name: pc.Name, id: d.nextID, dev: pc.Dev}
	d.nextID++
	p.rep, _ = pc.Dev.(blockdev.PathReporter)
	p.reg, _ = pc.Dev.(BufferRegistrar)
	p.state.Store(uint32(stLive))
	p.changed.Store(time.Now().UnixNano())
	p.lastAccess.Store(uint32(p.access()))
	return p
}

func (p *path) access() blockdev.AccessState {
	if p.rep == nil {
		return blockdev.AccessUnknown
	}
	return p.rep.AccessState()
}

func (p *path) class() int {
	if pathState(p.state.Load()) != stLive {
		return classUnusable
	}
	switch p.access() {
	case blockdev.AccessUnknown, blockdev.AccessOptimized:
		return classOptimized
	case blockdev.AccessNonOptimized:
		return classNonOptimized
	}
	return classUnusable
}

// hopeless tells whether the path will not serve I/O again.
func (p *path) hopeless() bool {
	switch pathState(p.state.Load()) {
	case stFailed, stRemoved:
		return true
	}
	return p.access() == blockdev.AccessPersistentLoss
}

// setState moves p from one of the states in from to to; it reports
// whether it did.
func (p *path) setState(to pathState, from ...pathState) bool {
	for {
		old := p.state.Load()
		if !slices.Contains(from, pathState(old)) {
			return false
		}
		if p.state.CompareAndSwap(old, uint32(to)) {
			p.changed.Store(time.Now().UnixNano())
			return true
		}
	}
}

// pathFailed takes p out of the selection after it failed a request with
// err: pending after a path refusal, down after a connection loss.
func (d *Device) pathFailed(p *path, err error) {
	to, from := stPending, []pathState{stLive}
	if errors.Is(err, blockdev.ErrClosed) {
		to, from = stDown, []pathState{stLive, stPending}
		if p.rep == nil {
			to = stFailed
		}
	}
	if !p.setState(to, from...) {
		return
	}
	d.mu.Lock()
	d.lastErr = fmt.Errorf("path %s: %w", p.name, err)
	d.mu.Unlock()
	d.log.Warn("multipath: path failed; failing over", "name", d.cfg.Name, "path", p.name, "state", to, "err", err, "usable", d.Usable())
	// The supervisor re-reads a pending path's state at once, unless it
	// did within RecheckInterval (a device that keeps refusing while
	// reporting a usable state is asked once per interval).
	d.poke()
}

// pick chooses a usable path by the policy, optimized paths first; nil when
// none is usable.
func (d *Device) pick() *path {
	ps := *d.paths.Load()
	switch len(ps) {
	case 0:
		return nil
	case 1:
		if ps[0].class() < classUnusable {
			return ps[0]
		}
		return nil
	}
	if d.cfg.Policy == QueueDepth {
		return d.pickQueueDepth(ps)
	}
	return d.pickRoundRobin(ps)
}

// pickRoundRobin takes the first optimized path after the last one taken,
// or else the first non-optimized one (nvme_round_robin_path).
func (d *Device) pickRoundRobin(ps []*path) *path {
	n := len(ps)
	last := int(d.rr.Load())
	fallback := -1
	for i := 1; i <= n; i++ {
		j := (last + i) % n
		switch ps[j].class() {
		case classOptimized:
			d.rr.Store(uint32(j))
			return ps[j]
		case classNonOptimized:
			if fallback < 0 {
				fallback = j
			}
		}
	}
	if fallback < 0 {
		return nil
	}
	d.rr.Store(uint32(fallback))
	return ps[fallback]
}

// pickQueueDepth takes the path of the best class with the fewest requests
// in flight; ties are taken in turn.
func (d *Device) pickQueueDepth(ps []*path) *path {
	n := len(ps)
	start := int(d.rr.Add(1))
	var best *path
	bestClass, bestDepth := classUnusable, int64(0)
	for i := range n {
		p := ps[(start+i)%n]
		c := p.class()
		if c == classUnusable {
			continue
		}
		q := p.inflight.Load()
		if best == nil || c < bestClass || c == bestClass && q < bestDepth {
			best, bestClass, bestDepth = p, c, q
		}
	}
	return best
}

// supervise resubmits the requeue list and rechecks unusable paths.
func (d *Device) supervise() {
	defer close(d.superDone)
	t := time.NewTimer(d.cfg.RecheckInterval)
	defer t.Stop()
	for {
		select {
		case <-d.done:
			return
		case <-d.kick:
		case <-t.C:
		}
		now := time.Now()
		next := d.recheck(now)
		if at := d.retry(now); !at.IsZero() && at.Before(next) {
			next = at
		}
		t.Reset(max(time.Until(next), time.Millisecond))
	}
}

// recheck re-reads the access state of paths that do not serve I/O, each
// in a goroutine of its own (it asks the target), and logs access state
// changes. It returns when it wants to run next.
func (d *Device) recheck(now time.Time) time.Time {
	next := now.Add(d.cfg.RecheckInterval)
	for _, p := range *d.paths.Load() {
		if a := p.access(); uint32(a) != p.lastAccess.Swap(uint32(a)) {
			d.log.Info("multipath: path access state changed", "name", d.cfg.Name, "path", p.name, "access", a, "state", pathState(p.state.Load()))
		}
		st := pathState(p.state.Load())
		if st == stFailed || st == stRemoved || st == stLive && p.access().Usable() {
			continue
		}
		if p.rep == nil {
			// Only a pending path gets here: try it again after a while.
			at := time.Unix(0, p.changed.Load()).Add(d.cfg.RecheckInterval)
			if !now.Before(at) {
				if p.setState(stLive, stPending) {
					d.log.Info("multipath: path back", "name", d.cfg.Name, "path", p.name)
				}
			} else if at.Before(next) {
				next = at
			}
			continue
		}
		at := time.Unix(0, p.lastRefresh.Load()).Add(d.cfg.RecheckInterval)
		if now.Before(at) {
			if at.Before(next) {
				next = at
			}
			continue
		}
		if p.refreshing.Swap(true) {
			continue
		}
		p.lastRefresh.Store(now.UnixNano())
		d.refreshes.Add(1)
		go d.refresh(p)
	}
	return next
}

// refresh re-reads p's access state and brings it back into the selection
// when the path serves I/O again.
func (d *Device) refresh(p *path) {
	defer d.refreshes.Done()
	defer p.refreshing.Store(false)
	a, err := p.rep.RefreshAccessState()
	if err != nil {
		d.log.Debug("multipath: re-reading the path's access state", "name", d.cfg.Name, "path", p.name, "err", err)
		return
	}
	// A path that answers is live again; whether it serves I/O is its
	// access state's business from now on.
	back := false
	if a.Usable() {
		back = p.setState(stLive, stPending, stDown)
	} else if a != blockdev.AccessPersistentLoss {
		p.setState(stLive, stPending)
	}
	if back {
		d.log.Info("multipath: path back", "name", d.cfg.Name, "path", p.name, "access", a, "usable", d.Usable())
	}
	d.poke()
}

// retry sends the requeue list again, fails what waited too long, and
// returns when the next request's wait ends (zero if none waits).
func (d *Device) retry(now time.Time) time.Time {
	d.mu.Lock()
	list := d.waiting
	d.waiting = nil
	d.mu.Unlock()
	if len(list) == 0 {
		return time.Time{}
	}
	if d.pick() != nil && d.noPath.Load() != nil {
		d.noPath.Store(nil)
	}
	var next time.Time
	var keep []*sub
	for _, s := range list {
		if d.closing.Load() {
			d.subDone(s, blockdev.ErrClosed)
			continue
		}
		ready := false
		if s.pinned {
			ready = s.path.class() < classUnusable || s.path.hopeless()
		} else {
			ready = d.pick() != nil || d.noPathNow() != nil
		}
		if ready {
			d.send(s, false)
			continue
		}
		if d.cfg.LossTimeout >= 0 {
			end := s.since.Add(d.cfg.LossTimeout)
			if !now.Before(end) {
				d.expire(s, now)
				continue
			}
			if next.IsZero() || end.Before(next) {
				next = end
			}
		}
		keep = append(keep, s)
	}
	if len(keep) > 0 {
		d.mu.Lock()
		d.waiting = append(keep, d.waiting...)
		d.mu.Unlock()
	}
	return next
}

// expire fails s, which waited the loss timeout for a path.
func (d *Device) expire(s *sub, now time.Time) {
	e := &NoPathError{Name: d.cfg.Name, For: now.Sub(s.since), Err: d.LastError()}
	if s.pinned {
		d.log.Error("multipath: a path's writes could not be flushed within the loss timeout", "name", d.cfg.Name, "path", s.path.name, "err", e)
		d.subDone(s, fmt.Errorf("multipath: flushing the writes path %s acknowledged: %w", s.path.name, e))
		return
	}
	if d.noPath.Swap(e) == nil {
		d.log.Error("multipath: no usable path within the loss timeout; failing I/O until one is", "name", d.cfg.Name, "err", e)
	}
	d.subDone(s, e)
}

// AddPath adds a path to the disk. It refuses, closing nothing, a path of
// another disk, geometry or smaller limits, or a taken name.
func (d *Device) AddPath(pc Path) error {
	if err := checkPath(pc); err != nil {
		return err
	}
	in := pc.Dev.Info()
	id := diskID(pc.Dev)
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return blockdev.ErrClosed
	}
	ps := *d.paths.Load()
	for _, o := range ps {
		if o.name == pc.Name {
			d.mu.Unlock()
			return fmt.Errorf("multipath: %s has a path %q already", d.cfg.Name, pc.Name)
		}
	}
	err := d.sameDisk(pc.Name, in, id)
	if err == nil && (in.Caps&d.info.Caps != d.info.Caps || in.MaxTransfer < d.info.MaxTransfer ||
		d.info.Caps&(blockdev.CapDiscard|blockdev.CapWriteZeroes) != 0 && in.MaxZeroes < d.info.MaxZeroes) {
		err = fmt.Errorf("multipath: path %q has fewer capabilities or smaller transfer limits than the device (caps %#x, max transfer %d; want %#x, %d)",
			pc.Name, in.Caps, in.MaxTransfer, d.info.Caps, d.info.MaxTransfer)
	}
	if err != nil {
		d.mu.Unlock()
		return err
	}
	if d.diskID == "" {
		d.diskID = id
	}
	p := d.newPath(pc)
	nps := append(slices.Clip(ps), p)
	d.paths.Store(&nps)
	d.mu.Unlock()
	if in.Queues < d.info.Queues || in.QueueDepth < d.info.QueueDepth {
		d.log.Warn("multipath: the new path has fewer or shorter queues than the device; submissions may wait for it", "name", d.cfg.Name, "path", pc.Name)
	}
	d.log.Info("multipath: path added", "name", d.cfg.Name, "path", pc.Name, "access", p.access(), "paths", names(nps))
	d.poke()
	return nil
}

// RemovePath takes a path out: no new I/O goes to it, its requests in
// flight complete (for up to drainTimeout; then they fail over), it is
// flushed when it carried writes, and its device is closed. The error is
// the flush's or the close's; the path is gone in any case.
func (d *Device) RemovePath(name string) error {
	d.mu.Lock()
	ps := *d.paths.Load()
	i := slices.IndexFunc(ps, func(p *path) bool { return p.name == name })
	if i < 0 {
		d.mu.Unlock()
		return fmt.Errorf("multipath: %s has no path %q", d.cfg.Name, name)
	}
	p := ps[i]
	nps := slices.Delete(slices.Clone(ps), i, i+1)
	d.paths.Store(&nps)
	p.state.Store(uint32(stRemoved))
	p.changed.Store(time.Now().UnixNano())
	d.mu.Unlock()
	d.poke() // pinned flushes of the path fail; nothing new picks it
	deadline := time.Now().Add(drainTimeout)
	for p.inflight.Load() > 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	var errs []error
	if p.dirty.Load() && p.inflight.Load() == 0 {
		if err := blockdev.Flush(p.dev); err != nil {
			errs = append(errs, fmt.Errorf("multipath: flushing path %s before removing it: %w", name, err))
		}
	}
	if err := p.dev.Close(); err != nil {
		errs = append(errs, fmt.Errorf("multipath: closing path %s: %w", name, err))
	}
	d.log.Info("multipath: path removed", "name", d.cfg.Name, "path", name, "paths", names(nps))
	return errors.Join(errs...)
}

// drainTimeout bounds how long RemovePath waits for the path's requests.
const drainTimeout = 5 * time.Second

// PathInfo describes one path for `rdisk list`.
type PathInfo struct {
	Name string `json:"name"`
	// State is the multipath layer's view: "live" (selected by its access
	// state), "pending" (refused I/O; its access state is being re-read),
	// "down" (connection lost; rechecked), "failed" (gone for good).
	State string `json:"state"`
	// Access is the path's access state (JSON: its name, "optimized"...).
	Access blockdev.AccessState `json:"-"`
	// InFlight is the number of requests on the path now.
	InFlight int `json:"in_flight"`
	// Completed and Errors count requests the path completed, without and
	// with an error; Failovers those it failed and that went to another
	// path.
	Completed uint64 `json:"completed"`
	Errors    uint64 `json:"errors"`
	Failovers uint64 `json:"failovers"`
	// Changed is when State last changed.
	Changed time.Time `json:"changed"`
}

type pathInfoJSON struct {
	Name   string `json:"name"`
	State  string `json:"state"`
	Access string `json:"access"`
	pathInfoCounters
}

type pathInfoCounters struct {
	InFlight  int       `json:"in_flight"`
	Completed uint64    `json:"completed"`
	Errors    uint64    `json:"errors"`
	Failovers uint64    `json:"failovers"`
	Changed   time.Time `json:"changed"`
}

// MarshalJSON writes Access by its name.
func (pi PathInfo) MarshalJSON() ([]byte, error) {
	return json.Marshal(pathInfoJSON{Name: pi.Name, State: pi.State, Access: pi.Access.String(),
		pathInfoCounters: pathInfoCounters{pi.InFlight, pi.Completed, pi.Errors, pi.Failovers, pi.Changed}})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (pi *PathInfo) UnmarshalJSON(b []byte) error {
	var j pathInfoJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	a, err := ParseAccessState(j.Access)
	if err != nil {
		return err
	}
	*pi = PathInfo{Name: j.Name, State: j.State, Access: a, InFlight: j.InFlight, Completed: j.Completed,
		Errors: j.Errors, Failovers: j.Failovers, Changed: j.Changed}
	return nil
}

// ParseAccessState parses an access state's name (AccessState.String); ""
// is AccessUnknown.
func ParseAccessState(s string) (blockdev.AccessState, error) {
	if s == "" {
		return blockdev.AccessUnknown, nil
	}
	for a := blockdev.AccessUnknown; a <= blockdev.AccessTransitioning; a++ {
		if a.String() == s {
			return a, nil
		}
	}
	return 0, fmt.Errorf("multipath: unknown access state %q", s)
}

// Paths describes the paths, in the order they were added.
func (d *Device) Paths() []PathInfo {
	var out []PathInfo
	for _, p := range *d.paths.Load() {
		out = append(out, PathInfo{Name: p.name, State: pathState(p.state.Load()).String(), Access: p.access(),
			InFlight: int(p.inflight.Load()), Completed: p.completed.Load(), Errors: p.errs.Load(),
			Failovers: p.failovers.Load(), Changed: time.Unix(0, p.changed.Load())})
	}
	return out
}
