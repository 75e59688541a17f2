package target

import (
	"testing"
	"time"

	"github.com/rdisk/rdisk/srp"
)

// Tests of Config.FirstIUTimeout, configured short: a login whose nexus
// sends nothing is logged out well before the default could, a nexus that
// has sent an IU keeps its channels, idle ones included.

const (
	shortTimeout = 300 * time.Millisecond
	closeWithin  = 5 * time.Second
)

// tur is an SRP_CMD with TEST UNIT READY for LUN 0.
func tur(tag uint64) []byte {
	b := make([]byte, srp.CmdSize)
	srp.Cmd(b).Encode(&srp.CmdFields{Tag: tag})
	return b
}

// waitEnded waits until c's connection ended, returning the SRP_T_LOGOUT
// received before (nil if none).
func waitEnded(t *testing.T, c *rawConn) []byte {
	t.Helper()
	var logout []byte
	deadline := time.Now().Add(closeWithin)
	for c.qp.Err() == nil {
		if time.Now().After(deadline) {
			t.Fatalf("channel still connected %v after the login, with a %v first-IU timeout", closeWithin, shortTimeout)
		}
		if iu := c.recv(50 * time.Millisecond); len(iu) > 0 && srp.Opcode(iu[0]) == srp.OpTLogout {
			logout = iu
		}
	}
	return logout
}

func waitStat(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(closeWithin)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, closeWithin)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestFirstIUTimeout(t *testing.T) {
	t.Parallel()
	cfg := Config{FirstIUTimeout: shortTimeout}
	t.Run("no IU", func(t *testing.T) {
		t.Parallel()
		lt := startTarget(t, cfg, PortConfig{}, memDisk(t, 1<<20))
		c, err := rawLogin(t, lt.addr, loginPD(rawLoginFields(srp.MakePortID(1, 1))))
		if err != nil {
			t.Fatal(err)
		}
		if iu := waitEnded(t, c); iu != nil {
			if r := srp.TLogoutReason(be32(iu[4:])); r != srp.TLogoutInactiveChannel {
				t.Fatalf("SRP_T_LOGOUT reason %s, want %s", r, srp.TLogoutInactiveChannel)
			}
		}
		waitStat(t, "inactive counted", func() bool {
			st := lt.t.Stats()
			return st.ChannelsClosed["inactive"] == 1 && st.Live == 0
		})
	})
	t.Run("active nexus stays", func(t *testing.T) {
		t.Parallel()
		lt := startTarget(t, cfg, PortConfig{}, memDisk(t, 1<<20))
		ipid := srp.MakePortID(2, 2)
		c, err := rawLogin(t, lt.addr, loginPD(rawLoginFields(ipid)))
		if err != nil {
			t.Fatal(err)
		}
		c.send(tur(1))
		if rsp := c.recv(closeWithin); len(rsp) == 0 || srp.Opcode(rsp[0]) != srp.OpRsp {
			t.Fatalf("no SRP_RSP to TEST UNIT READY: %x", rsp)
		}
		// A second channel of the nexus that never sends: it may idle.
		f := rawLoginFields(ipid)
		f.ReqFlags = srp.MultiChanMulti
		c2, err := rawLogin(t, lt.addr, loginPD(f))
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(3 * shortTimeout)
		if c.qp.Err() != nil || c2.qp.Err() != nil {
			t.Fatalf("channels of an active nexus ended: %v, %v", c.qp.Err(), c2.qp.Err())
		}
		c.send(tur(2))
		if rsp := c.recv(closeWithin); len(rsp) == 0 || srp.Opcode(rsp[0]) != srp.OpRsp {
			t.Fatalf("no SRP_RSP after idling: %x", rsp)
		}
		if st := lt.t.Stats(); st.ChannelsClosed["inactive"] != 0 || st.Live != 2 {
			t.Fatalf("inactive %d, live %d; want 0, 2", st.ChannelsClosed["inactive"], st.Live)
		}
	})
}

// TestFirstIUTimeoutDefault checks the default and the disabling.
func TestFirstIUTimeoutDefault(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ set, want time.Duration }{{0, DefaultFirstIUTimeout}, {-1, -1}, {time.Minute, time.Minute}} {
		tg, err := New(Config{FirstIUTimeout: c.set})
		if err != nil {
			t.Fatal(err)
		}
		if got := tg.Config().FirstIUTimeout; got != c.want {
			t.Errorf("FirstIUTimeout %v: %v, want %v", c.set, got, c.want)
		}
		tg.Close()
	}
	if DefaultFirstIUTimeout != 30*time.Second {
		t.Fatalf("default %v", DefaultFirstIUTimeout)
	}
}

func be32(b []byte) uint32 {
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}
