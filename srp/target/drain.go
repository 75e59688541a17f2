package target

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/rdisk/rdisk/srp"
)

// drainPoll is how often Drain looks at the channels.
const drainPoll = 5 * time.Millisecond

// Drain takes the target out of service gracefully. It closes the
// listeners (Listen then fails with ErrDraining) and refuses logins with
// SRP_LOGIN_REJ "insufficient RDMA channel resources" (as Linux srpt
// refuses logins to a disabled port; Stats reason "shutting_down"); the
// channels get no more credits (responses carry a REQUEST LIMIT DELTA of
// 0), so initiators send no new commands, and once a channel's commands
// in flight have been answered it is logged out (SRP_T_LOGOUT, then a
// disconnect once sent, or after a second). Drain returns nil once every
// channel has ended. If ctx ends first, the remaining channels are
// disconnected (commands still running are aborted; Drain does not wait
// for them) and the error, which wraps ctx.Err(), names the channels and
// the commands in flight that were left. Channels Drain ended count as
// "drain" in Stats.ChannelsClosed.
//
// The target stays draining: later logins are refused. Close still has
// to be called (it may be, after Drain or during it).
func (t *Target) Drain(ctx context.Context) error {
	t.mu.Lock()
	t.draining.Store(true)
	ls := t.listeners
	t.mu.Unlock()
	for _, l := range ls {
		l.Close()
	}
	t.log.Info("srp: draining", "channels", len(t.drainChannels()))
	asked := map[*channel]bool{}
	tick := time.NewTicker(drainPoll)
	defer tick.Stop()
	for {
		chs := t.drainChannels()
		if len(chs) == 0 {
			t.log.Info("srp: drained")
			return nil
		}
		for _, ch := range chs {
			if asked[ch] {
				continue
			}
			ch.freeze()
			if ch.inflight() > 0 {
				continue
			}
			asked[ch] = true
			ch.logoutFor(srp.TLogoutNoReason, endDrain)
		}
		select {
		case <-ctx.Done():
			return t.drainCut(ctx)
		case <-tick.C:
		}
	}
}

// drainChannels returns the channels of every port (those attached:
// logged in, or being accepted), by ID.
func (t *Target) drainChannels() []*channel {
	var chs []*channel
	for _, p := range t.Ports() {
		p.mu.Lock()
		for _, nx := range p.nexuses {
			chs = append(chs, nx.channels...)
		}
		p.mu.Unlock()
	}
	slices.SortFunc(chs, func(a, b *channel) int { return cmp.Compare(a.id, b.id) })
	return chs
}

// drainCut disconnects what a Drain whose ctx ended leaves and says what
// that was.
func (t *Target) drainCut(ctx context.Context) error {
	chs := t.drainChannels()
	if len(chs) == 0 {
		t.log.Info("srp: drained")
		return nil
	}
	cmds := 0
	ids := make([]string, len(chs))
	for i, ch := range chs {
		cmds += ch.inflight()
		ids[i] = fmt.Sprint(ch.id)
		ch.setEnd(endDrain)
		ch.shutdown("drain: " + ctx.Err().Error())
	}
	what := fmt.Sprintf("%s left (ID %s)", count(len(chs), "channel"), strings.Join(ids, ", "))
	if cmds > 0 {
		what += ", " + count(cmds, "command") + " in flight"
	}
	t.log.Warn("srp: drain cut short", "left", what, "err", ctx.Err())
	return fmt.Errorf("srp: drain: %s: %w", what, ctx.Err())
}

// count is "1 thing" or "n things".
func count(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}
