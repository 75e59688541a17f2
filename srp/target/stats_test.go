package target

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rdisk/rdisk/scsi"
	"github.com/rdisk/rdisk/srp"
	"github.com/rdisk/rdisk/srp/initiator"
)

// Tests of Stats and of the channel and login log lines.

// logCapture is a slog.Logger writing JSON records to memory.
type logCapture struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (lc *logCapture) Write(p []byte) (int, error) {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	return lc.buf.Write(p)
}

func (lc *logCapture) logger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(lc, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// records returns the records whose message is msg.
func (lc *logCapture) records(t *testing.T, msg string) []map[string]any {
	t.Helper()
	lc.mu.Lock()
	defer lc.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(lc.buf.String()), "\n") {
		if line == "" {
			continue
		}
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if r["msg"] == msg {
			out = append(out, r)
		}
	}
	return out
}

// waitStats waits until ok holds for tg's Stats and returns them.
func waitStats(t *testing.T, tg *Target, what string, ok func(Stats) bool) Stats {
	t.Helper()
	var st Stats
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if st = tg.Stats(); ok(st) {
			return st
		}
	}
	t.Fatalf("%s: stats %+v", what, st)
	return st
}

// loginErr logs in to port of lt as ipid and returns the error.
func loginErr(t *testing.T, lt *loopTarget, port, ipid srp.PortID) error {
	t.Helper()
	s, err := initiator.Login(testCtx(t), newProvider(t), lt.addr, port, initiator.Config{InitiatorPortID: ipid, Logger: testLogger()})
	if err == nil {
		s.Close()
	}
	return err
}

var (
	statsA = srp.MakePortID(0x5a, 0x5a)
	statsB = srp.MakePortID(0x5b, 0x5b)
)

func TestStats(t *testing.T) {
	t.Parallel()
	lt := startTarget(t, Config{}, PortConfig{AllowedInitiators: []string{statsA.String()}}, newTestDisk(t, 1<<20))
	st := lt.t.Stats()
	if len(st.LoginRejectsByReason) != int(nRejectReasons) || len(st.ChannelsClosed) != int(nEndReasons)-1 {
		t.Fatalf("Stats of a new target: %+v, want every key of each set", st)
	}
	for _, m := range []map[string]uint64{st.LoginRejectsByReason, st.ChannelsClosed} {
		for k, v := range m {
			if v != 0 {
				t.Errorf("%s = %d on a new target", k, v)
			}
		}
	}
	if st.Live != 0 || st.Logins != 0 {
		t.Errorf("Stats of a new target: %+v", st)
	}

	s := login(t, lt, initiator.Config{InitiatorPortID: statsA})
	clearUA(t, s)
	st = waitStats(t, lt.t, "after a login", func(st Stats) bool { return st.Live == 1 })
	if st.Logins != 1 {
		t.Errorf("after a login: %+v", st)
	}

	// Refusals: the ACL, an unknown port, a bad request.
	if err := loginErr(t, lt, testTargetID, statsB); !errors.Is(err, srp.RejUnableEstablishChannel) {
		t.Errorf("login of an initiator not in the ACL: %v", err)
	}
	if err := loginErr(t, lt, srp.MakePortID(1, 1), statsA); !errors.Is(err, srp.RejUnableAssociateChannel) {
		t.Errorf("login to an unknown port: %v", err)
	}
	f := rawLoginFields(statsA)
	f.ReqITIULen = DefaultMaxIULen + 1
	if rej := rejectOf(t, lt.addr, loginPD(f)); rej.Reason != srp.RejITIULenTooLarge {
		t.Errorf("login with a long IU: %v", rej.Reason)
	}
	st = waitStats(t, lt.t, "after the refusals", func(st Stats) bool { return st.LoginRejects == 3 })
	if r := st.LoginRejectsByReason; r["forbidden"] != 1 || r["not_found"] != 1 || r["bad_request"] != 1 {
		t.Errorf("refusals by reason: %v", r)
	}

	// A second login of the same initiator port (MULTI-CHANNEL ACTION
	// 0) replaces the first channel.
	s2 := login(t, lt, initiator.Config{InitiatorPortID: statsA})
	clearUA(t, s2)
	st = waitStats(t, lt.t, "after a reinstatement", func(st Stats) bool { return st.ChannelsClosed["reinstated"] == 1 })
	if st.Live != 1 || st.Logins != 2 {
		t.Errorf("after a reinstatement: %+v", st)
	}
	// An initiator logout.
	s2.Close()
	st = waitStats(t, lt.t, "after a logout", func(st Stats) bool { return st.Live == 0 })
	if st.ChannelsClosed["logout"] != 1 || st.ILogouts != 1 {
		t.Errorf("after a logout: %+v", st)
	}
	// A channel closed by the administrator.
	s3 := login(t, lt, initiator.Config{InitiatorPortID: statsA})
	clearUA(t, s3)
	chs := lt.t.Channels()
	if len(chs) != 1 {
		t.Fatalf("Channels %+v", chs)
	}
	if err := lt.t.CloseChannel(chs[0].ID); err != nil {
		t.Fatal(err)
	}
	st = waitStats(t, lt.t, "after CloseChannel", func(st Stats) bool { return st.Live == 0 })
	var closed uint64
	for _, v := range st.ChannelsClosed {
		closed += v
	}
	if st.ChannelsClosed["admin"] != 1 || closed != 3 || st.Logins != 3 {
		t.Errorf("after CloseChannel: %+v", st)
	}
}

// TestChannelLogs: one "channel logged in" and one "channel ended" line
// per channel, with its identity; a refused login logs a warning with the
// peer, the port IDs and the reason.
func TestChannelLogs(t *testing.T) {
	t.Parallel()
	var lc logCapture
	lt := startTarget(t, Config{Logger: lc.logger()}, PortConfig{AllowedInitiators: []string{statsA.String()}}, newTestDisk(t, 1<<20))
	s := login(t, lt, initiator.Config{InitiatorPortID: statsA})
	clearUA(t, s)
	if err := s.Exec(testCtx(t), 0, &initiator.Command{CDB: rw10(scsi.OpWrite10, 0, 8), Dir: scsi.DirOut, Data: make([]byte, 4096)}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	waitStats(t, lt.t, "after the logout", func(st Stats) bool { return st.ChannelsClosed["logout"] == 1 })
	if err := loginErr(t, lt, testTargetID, statsB); err == nil {
		t.Fatal("login of an initiator not in the ACL succeeded")
	}

	check := func(r map[string]any, what string, extra map[string]any) {
		t.Helper()
		want := map[string]any{"port": testTargetID.String(), "initiator": statsA.String(), "level": "INFO"}
		for k, v := range extra {
			want[k] = v
		}
		for k, v := range want {
			if r[k] != v {
				t.Errorf("%s: %s = %v, want %v (%v)", what, k, r[k], v, r)
			}
		}
		if p, _ := r["peer"].(string); !strings.HasPrefix(p, "127.0.0.1:") || p == lt.addr {
			t.Errorf("%s: peer %v", what, r["peer"])
		}
		if _, ok := r["channel"].(float64); !ok {
			t.Errorf("%s: no channel ID: %v", what, r)
		}
	}
	in := lc.records(t, "srp: channel logged in")
	if len(in) != 1 {
		t.Fatalf("%d channel logged in lines, want 1: %v", len(in), in)
	}
	check(in[0], "channel logged in", map[string]any{"depth": float64(DefaultQueueDepth)})
	out := lc.records(t, "srp: channel ended")
	if len(out) != 1 {
		t.Fatalf("%d channel ended lines, want 1: %v", len(out), out)
	}
	check(out[0], "channel ended", map[string]any{"reason": "logout", "channel": in[0]["channel"]})
	ref := lc.records(t, "srp: login refused")
	if len(ref) != 1 {
		t.Fatalf("%d login refused lines, want 1: %v", len(ref), ref)
	}
	r := ref[0]
	if p, _ := r["peer"].(string); r["level"] != "WARN" || !strings.HasPrefix(p, "127.0.0.1:") || r["initiator"] != statsB.String() ||
		r["port"] != testTargetID.String() || r["reason"] != "forbidden" || r["err"] == nil {
		t.Errorf("login refused: %v", r)
	}
}
