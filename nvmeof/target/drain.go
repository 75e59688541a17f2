package target

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
)

// drainPoll is how often Drain looks at the commands in flight.
const drainPoll = time.Millisecond

// Drain stops the target the graceful way: every port stops listening,
// Fabrics Connects are refused (Connect Controller Busy, without DNR, so
// hosts keep trying), the I/O commands already received complete, those
// on disk workers included, and are answered; then every controller is
// torn down, reason "target drain", and Drain returns nil. If ctx ends
// first, the controllers are torn down all the same and the error says
// how many commands were left in flight on which controllers (their
// completions are lost with the connections; Close waits for the disks).
// Target.Close must still be called; AddPort fails once Drain began.
//
// An I/O command received once the drain began is neither run nor
// answered: a host under steady load would otherwise never let the
// target finish. It is lost with the connection, as every command
// outstanding when a controller ends, and a host sends it again once it
// has reconnected (Linux requeues them, or fails them over to another
// path with multipath). Admin commands (Keep Alive among them) are
// served to the end.
//
// NVMe over Fabrics has no message by which a target tells a host it
// goes away: no AEN, no Fabrics command, no transport PDU (the NVMe/TCP
// C2HTermReq is for protocol errors). Linux nvmet, when a port is removed
// or a subsystem unlinked from it (nvmet_port_del_ctrls), and when it
// shuts down, just deletes the controllers: the transport drops the
// connections (rdma_disconnect, a TCP socket shutdown), after nvmet
// waited for each queue's outstanding requests (nvmet_sq_destroy). The
// host sees its queues fail and reconnects every reconnect_delay until
// ctrl_loss_tmo. Drain does the same, after letting the commands in
// flight answer.
func (t *Target) Drain(ctx context.Context) error {
	start := time.Now()
	t.mu.Lock()
	t.draining.Store(true)
	ports := make([]*Port, 0, len(t.ports))
	for _, p := range t.ports {
		ports = append(ports, p)
	}
	t.mu.Unlock()
	for _, p := range ports {
		p.ln.Close()
	}
	// A Connect that registers its controller after this listing sees
	// draining set and refuses it (connectAdmin).
	var cs []*controller
	for _, s := range t.subsystems(true) {
		s.mu.RLock()
		cs = append(cs, s.controllersLocked()...)
		s.mu.RUnlock()
	}
	for _, c := range cs {
		c.quiesce()
	}
	// Queues without a controller could only be refused their Connect.
	t.disconnectOrphans()
	t.log.Info("nvmeof: draining", "ports", len(ports), "controllers", len(cs))
	tick := time.NewTicker(drainPoll)
	defer tick.Stop()
	// The commands answered, then their completions sent (the
	// namespaces' counts, which also hold the commands of controllers
	// that ended meanwhile and still run on disk workers).
	var err error
wait:
	for {
		left, sending := inFlight(cs), t.namespacesInFlight()
		if len(left) == 0 && sending == 0 {
			break
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			err = drainError(ctx.Err(), left, sending)
			break wait
		}
	}
	for _, c := range cs {
		c.end(reasonDrain, nil, err == nil)
	}
	t.disconnectOrphans()
	if err != nil {
		t.log.Warn("nvmeof: drain cut short; controllers torn down", "err", err, "duration", time.Since(start))
		return err
	}
	t.log.Info("nvmeof: drained", "controllers", len(cs), "duration", time.Since(start))
	return nil
}

// disconnectOrphans ends the queues that have no controller, once their
// responses (a refused Connect) are sent.
func (t *Target) disconnectOrphans() {
	t.mu.Lock()
	var qs []*sq
	for q := range t.queues {
		qs = append(qs, q)
	}
	t.mu.Unlock()
	for _, q := range qs {
		if q.controller() == nil {
			q.tr.finish()
		}
	}
}

// busyController is a controller with commands in flight.
type busyController struct {
	c *controller
	n int64
}

// inFlight lists the controllers of cs with I/O commands in flight.
func inFlight(cs []*controller) []busyController {
	var out []busyController
	for _, c := range cs {
		if n := c.inFlight(); n > 0 {
			out = append(out, busyController{c, n})
		}
	}
	return out
}

// namespacesInFlight sums the commands in flight on every namespace.
func (t *Target) namespacesInFlight() int64 {
	var n int64
	for _, s := range t.subsystems(false) {
		s.mu.RLock()
		for _, ns := range s.ns {
			n += ns.st.inFlight()
		}
		s.mu.RUnlock()
	}
	return n
}

// drainError says which controllers had how many commands in flight
// when the drain's context ended with err (onNS: on the namespaces,
// whose completions may be answered and not yet sent).
func drainError(err error, left []busyController, onNS int64) error {
	if len(left) == 0 {
		return fmt.Errorf("nvmeof target: drain: %w with %d I/O commands in flight on the namespaces (answered, or of controllers gone, on disk workers)", err, onNS)
	}
	slices.SortFunc(left, func(a, b busyController) int {
		return cmp.Or(strings.Compare(a.c.sub.cfg.NQN, b.c.sub.cfg.NQN), cmp.Compare(a.c.cntlid, b.c.cntlid))
	})
	var total int64
	parts := make([]string, len(left))
	for i, b := range left {
		total += b.n
		parts[i] = fmt.Sprintf("%d on controller %d of %s (host %s)", b.n, b.c.cntlid, b.c.sub.cfg.NQN, b.c.hostNQN)
	}
	return fmt.Errorf("nvmeof target: drain: %w with %d I/O commands in flight: %s", err, total, strings.Join(parts, ", "))
}
