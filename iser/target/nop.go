package target

import (
	"time"

	"github.com/rdisk/rdisk/iser"
)

// The NOP-In keepalive of a connection in full feature phase, as LIO's
// nopin timers (iscsit_start_nopin_timer, iscsit_handle_nopin_timeout,
// nopin_response_timeout): when nothing has arrived for
// Config.NopInInterval the target sends a NOP-In ping with a Target
// Transfer Tag of its own (not 0xffffffff), which the initiator must echo
// in a NOP-Out (ITT 0xffffffff, the same TTT); unanswered for
// Config.NopInTimeout, the connection is dropped and its tasks end as on
// any connection loss. One timer per connection does both: it looks
// every NopInInterval whether a PDU arrived meanwhile (conn.rxSeen, set
// by the receive side), and while a ping is out it fires when the ping
// expires.

// startNop arms the keepalive (once the session is open).
func (c *conn) startNop() {
	iv := c.t.cfg.NopInInterval
	if iv <= 0 {
		return
	}
	c.nopMu.Lock()
	defer c.nopMu.Unlock()
	if c.nopOff {
		return
	}
	c.nopTimer = time.AfterFunc(iv, c.nopTick)
}

// stopNop ends the keepalive for good.
func (c *conn) stopNop() {
	c.nopMu.Lock()
	c.nopOff = true
	if c.nopTimer != nil {
		c.nopTimer.Stop()
	}
	c.nopMu.Unlock()
}

// received notes that a PDU arrived (receive side, once per PDU).
func (c *conn) received() {
	if !c.rxSeen.Load() {
		c.rxSeen.Store(true)
	}
}

// nopTick is the keepalive timer: it pings an idle connection, or drops
// one whose ping went unanswered.
func (c *conn) nopTick() {
	cfg := &c.t.cfg
	c.nopMu.Lock()
	if c.nopOff {
		c.nopMu.Unlock()
		return
	}
	if c.nopTTT != 0 {
		ttt := c.nopTTT
		c.nopOff = true
		c.nopMu.Unlock()
		c.setEnd(endTimeout)
		c.log.Warn("iscsi: no answer to a NOP-In ping, dropping the connection", "ttt", ttt, "timeout", cfg.NopInTimeout)
		c.drop("NOP-In ping unanswered")
		return
	}
	if c.rxSeen.Swap(false) {
		c.nopTimer.Reset(cfg.NopInInterval)
		c.nopMu.Unlock()
		return
	}
	c.nopSeq++
	if c.nopSeq == 0 || c.nopSeq == iser.ReservedTag {
		c.nopSeq = 1
	}
	c.nopTTT = c.nopSeq
	ttt := c.nopTTT
	if cfg.NopInTimeout > 0 {
		c.nopTimer.Reset(cfg.NopInTimeout)
	}
	c.nopMu.Unlock()
	// RFC 7143 section 11.19: a NOP-In that asks for a response has ITT
	// 0xffffffff, a TTT of the target's, and does not advance StatSN.
	r := &ctl{}
	iser.NOPIn(r.hdr[:]).Encode(&iser.NOPInFields{ITT: iser.ReservedTag, TTT: ttt})
	c.x.send(r)
}

// nopAnswered takes a NOP-Out echoing a ping (ITT 0xffffffff): the ping
// with that TTT is answered and the keepalive goes back to watching.
// Echoes of other TTTs (late, or made up) are ignored, as LIO ignores a
// NOP-Out whose TTT it does not know.
func (c *conn) nopAnswered(ttt uint32) {
	c.nopMu.Lock()
	defer c.nopMu.Unlock()
	if c.nopOff || c.nopTTT == 0 || ttt != c.nopTTT {
		return
	}
	c.nopTTT = 0
	c.rxSeen.Store(false)
	c.nopTimer.Reset(c.t.cfg.NopInInterval)
}
