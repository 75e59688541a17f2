package target

import (
	"fmt"
	"sync/atomic"
	"time"
)

// The connect timeout (Config.ConnectTimeout): a transport connection
// whose queue has not completed a Fabrics Connect in time is closed. The
// keep-alive timer starts only with a controller (as nvmet's, at the
// admin Connect), so without it a peer that connects and sends nothing,
// or only a part of its ICReq or capsule, or whose Connect was refused,
// would hold the queue and its buffers until it went away.

// connectTimer closes a queue still without a controller when the port's
// connect timeout expires. A zero connectTimer (timeout disabled) does
// nothing.
type connectTimer struct {
	t     *time.Timer
	d     time.Duration
	fired atomic.Bool
}

// startConnectTimer arms the connect timeout of a connection accepted at
// since: at expiry, unless connected reports true, closeConn is called
// (from the timer's goroutine).
func (p *Port) startConnectTimer(since time.Time, connected func() bool, closeConn func()) *connectTimer {
	ct := &connectTimer{d: p.t.connectTimeout}
	if ct.d <= 0 {
		return ct
	}
	ct.t = time.AfterFunc(time.Until(since.Add(ct.d)), func() {
		if connected() {
			return
		}
		ct.fired.Store(true)
		closeConn()
	})
	return ct
}

// stop disarms the timer.
func (ct *connectTimer) stop() {
	if ct.t != nil {
		ct.t.Stop()
	}
}

// expired reports whether the timer closed the connection.
func (ct *connectTimer) expired() bool { return ct.fired.Load() }

// err describes the expiry, for the log.
func (ct *connectTimer) err(what string) error {
	return fmt.Errorf("%s within the %v connect timeout", what, ct.d)
}

// connectTimedOut counts and logs a queue of transport trType closed by
// its connect timeout.
func (p *Port) connectTimedOut(trType uint8, peer string, qid uint16, err error) {
	p.t.log.Warn("nvmeof: queue closed: no Fabrics Connect in time", "reason", portReasonNames[portConnectTimeout], "port", p.cfg.ID,
		"transport", trName(trType), "peer", peer, "qid", qid, "err", err)
	p.counters(trType).rejected[portConnectTimeout].Add(1) // after the line: a reader of the count finds it
}
