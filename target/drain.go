package target

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// Drain stops r the graceful way, for SIGTERM: every transport stops
// accepting, the commands already received complete, each host is told
// the protocol's way (iSCSI: Async Message "target requests logout"; SRP:
// SRP_T_LOGOUT; NVMe-oF has no target-initiated goodbye, so its
// controllers are disconnected once their commands are answered), then
// every disk is flushed, so what was acknowledged is on the medium. It
// returns nil when all of that ended cleanly before ctx ended, otherwise
// an error naming what was left (hosts, commands in flight, disks whose
// flush failed). Close still has to be called.
func (r *Running) Drain(ctx context.Context) error {
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	drain := func(what string, f func(context.Context) error) {
		wg.Go(func() {
			if err := f(ctx); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("%s: %w", what, err))
				mu.Unlock()
			}
		})
	}
	drain("NVMe-oF", r.T.Drain)
	if r.ISCSI != nil {
		drain("iSCSI", r.ISCSI.Drain)
	}
	if r.SRP != nil {
		drain("SRP", r.SRP.Drain)
	}
	wg.Wait()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.cfg.Subsystems {
		for _, ns := range s.Namespaces {
			d := r.disks[nsKey{s.NQN, ns.NSID}]
			if d == nil {
				continue
			}
			if err := d.Flush(); err != nil {
				errs = append(errs, fmt.Errorf("flushing subsystem %s namespace %d (%s): %w", s.NQN, ns.NSID, ns.Device.Path, err))
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("draining the target: %w", errors.Join(errs...))
	}
	return nil
}
