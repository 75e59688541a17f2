package target

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rdisk/rdisk/iser"
	"github.com/rdisk/rdisk/iser/initiator"
	"github.com/rdisk/rdisk/scsi"
)

// Tests of Stats and of the session and login log lines.

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

const (
	statsCHAPIQN = fuzzIQN + "-chap"
	statsOther   = "iqn.2026-11.io.rdisk:not-allowed"
)

var statsCHAP = &iser.CHAPSecret{User: "stats-user", Secret: "stats-secret-1"}

// statsPortal has the test target (fuzzIQN) open to mgmtInitiator only and
// a second one (statsCHAPIQN) that wants CHAP.
func statsPortal(t *testing.T, log *slog.Logger) *portal {
	return startPortal(t, func(c *Config) {
		c.Logger = log
		c.Targets[0].AllowedInitiators = []string{mgmtInitiator}
		c.Targets = append(c.Targets, TargetConfig{Name: statsCHAPIQN, CHAP: statsCHAP})
	})
}

func loginStatus(t *testing.T, err error) iser.LoginStatus {
	t.Helper()
	var st iser.LoginStatus
	if !errors.As(err, &st) {
		t.Fatalf("login: %v, want a refusal", err)
	}
	return st
}

func TestStats(t *testing.T) {
	t.Parallel()
	for _, x := range mgmtTransports {
		t.Run(x.name, func(t *testing.T) {
			t.Parallel()
			pt := statsPortal(t, nil)
			st := pt.tg.Stats()
			if len(st.Connections) != 2 || len(st.LoginRejects) != int(nRejectReasons) || len(st.SessionsClosed) != int(nEndReasons)-1 {
				t.Fatalf("Stats of a new target: %+v, want every key of each set", st)
			}
			for _, m := range []map[string]uint64{st.Connections, st.LoginRejects, st.SessionsClosed} {
				for k, v := range m {
					if v != 0 {
						t.Errorf("%s = %d on a new target", k, v)
					}
				}
			}
			if st.Logins != 0 || st.Live != 0 {
				t.Errorf("Stats of a new target: %+v", st)
			}

			s := pt.mustLogin(t, x.tr, fuzzIQN, pt.config(t, mgmtInitiator))
			clearUAs(t, s, 0)
			st = waitStats(t, pt.tg, "after a login", func(st Stats) bool { return st.Live == 1 })
			if st.Logins != 1 || st.DiscoveryLogins != 0 || st.Connections[x.name] != 1 {
				t.Errorf("after a login: %+v", st)
			}

			// Refusals: ACL, CHAP (none offered, wrong secret), unknown
			// target.
			if _, err := pt.login(t, x.tr, fuzzIQN, pt.config(t, statsOther)); loginStatus(t, err) != iser.LoginForbidden {
				t.Errorf("login of an initiator not in the ACL: %v", err)
			}
			waitStats(t, pt.tg, "after an ACL refusal", func(st Stats) bool { return st.LoginRejects["forbidden"] == 1 })
			if _, err := pt.login(t, x.tr, statsCHAPIQN, pt.config(t, mgmtInitiator)); loginStatus(t, err) != iser.LoginAuthFailed {
				t.Errorf("login without CHAP: %v", err)
			}
			cfg := pt.config(t, mgmtInitiator)
			cfg.CHAP = &iser.CHAPSecret{User: statsCHAP.User, Secret: "wrong-secret-12"}
			if _, err := pt.login(t, x.tr, statsCHAPIQN, cfg); loginStatus(t, err) != iser.LoginAuthFailed {
				t.Errorf("login with a wrong CHAP secret: %v", err)
			}
			waitStats(t, pt.tg, "after CHAP failures", func(st Stats) bool { return st.LoginRejects["auth_failed"] == 2 })
			if _, err := pt.login(t, x.tr, fuzzIQN+"-none", pt.config(t, mgmtInitiator)); loginStatus(t, err) != iser.LoginNotFound {
				t.Errorf("login to an unknown target: %v", err)
			}
			waitStats(t, pt.tg, "after an unknown target", func(st Stats) bool { return st.LoginRejects["not_found"] == 1 })
			cfg.CHAP = statsCHAP
			pt.mustLogin(t, x.tr, statsCHAPIQN, cfg)
			st = waitStats(t, pt.tg, "after a CHAP login", func(st Stats) bool { return st.Live == 2 })

			// A logout.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := s.Logout(ctx); err != nil {
				t.Fatal(err)
			}
			st = waitStats(t, pt.tg, "after a logout", func(st Stats) bool { return st.Live == 1 })
			if st.Logouts != 1 || st.SessionsClosed["logout"] != 1 || st.Logins != 2 || st.Connections[x.name] != 6 {
				t.Errorf("after a logout: %+v", st)
			}
			var closed uint64
			for _, v := range st.SessionsClosed {
				closed += v
			}
			var rejects uint64
			for _, v := range st.LoginRejects {
				rejects += v
			}
			if closed != 1 || rejects != 4 {
				t.Errorf("after a logout: %d sessions closed, %d logins refused; want 1 and 4: %+v", closed, rejects, st)
			}
			other := "iser"
			if x.name == "iser" {
				other = "tcp"
			}
			if st.Connections[other] != 0 {
				t.Errorf("%d %s connections counted, none made", st.Connections[other], other)
			}

			// A session ended by the administrator counts as such.
			tsih := waitSessions(t, pt.tg, 1)[0].TSIH
			if err := pt.tg.CloseSession(tsih); err != nil {
				t.Fatal(err)
			}
			st = waitStats(t, pt.tg, "after CloseSession", func(st Stats) bool { return st.Live == 0 })
			if st.SessionsClosed["admin"] != 1 || st.Logouts != 2 {
				t.Errorf("after CloseSession: %+v", st)
			}
		})
	}
}

// TestStatsDiscovery: a discovery session counts as a discovery login,
// its end as a closed session.
func TestStatsDiscovery(t *testing.T) {
	t.Parallel()
	tg := newTestTarget(t, nil)
	c, _, _, _, done := loginPipe(t, tg, true)
	st := waitStats(t, tg, "after a discovery login", func(st Stats) bool { return st.Live == 1 })
	if st.DiscoveryLogins != 1 || st.Logins != 0 || st.Connections["tcp"] != 1 {
		t.Errorf("after a discovery login: %+v", st)
	}
	c.Close()
	<-done
	st = tg.Stats()
	if st.Live != 0 || st.SessionsClosed["connection_lost"] != 1 {
		t.Errorf("after the connection closed: %+v", st)
	}
}

// TestSessionLogs: one "session opened" and one "session ended" line per
// session, with the session's identity; a refused login logs a warning
// with the peer, the initiator and the reason.
func TestSessionLogs(t *testing.T) {
	t.Parallel()
	for _, x := range mgmtTransports {
		t.Run(x.name, func(t *testing.T) {
			t.Parallel()
			var lc logCapture
			pt := statsPortal(t, lc.logger())
			cfg := pt.config(t, mgmtInitiator)
			cfg.ISID = iser.ISID{0x80, 0, 0, 0xab, 0xcd, 0xef}
			s := pt.mustLogin(t, x.tr, fuzzIQN, cfg)
			clearUAs(t, s, 0)
			execute(t, s, &initiator.Command{CDB: rw10(scsi.OpWrite10, 0, 8), DataOut: make([]byte, 4096)})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := s.Logout(ctx); err != nil {
				t.Fatal(err)
			}
			waitStats(t, pt.tg, "after the logout", func(st Stats) bool { return st.SessionsClosed["logout"] == 1 })
			if _, err := pt.login(t, x.tr, fuzzIQN, pt.config(t, statsOther)); err == nil {
				t.Fatal("login of an initiator not in the ACL succeeded")
			}
			chapCfg := pt.config(t, mgmtInitiator)
			chapCfg.CHAP = &iser.CHAPSecret{User: statsCHAP.User, Secret: "wrong-secret-12"}
			if _, err := pt.login(t, x.tr, statsCHAPIQN, chapCfg); err == nil {
				t.Fatal("login with a wrong CHAP secret succeeded")
			}
			waitStats(t, pt.tg, "after the refusals", func(st Stats) bool {
				return st.LoginRejects["forbidden"] == 1 && st.LoginRejects["auth_failed"] == 1
			})

			want := map[string]any{
				"target": fuzzIQN, "initiator": mgmtInitiator, "isid": "800000abcdef", "tsih": float64(s.TSIH()),
				"transport": x.name,
			}
			check := func(r map[string]any, what string, extra map[string]any) {
				t.Helper()
				for k, v := range want {
					if r[k] != v {
						t.Errorf("%s: %s = %v, want %v (%v)", what, k, r[k], v, r)
					}
				}
				for k, v := range extra {
					if r[k] != v {
						t.Errorf("%s: %s = %v, want %v (%v)", what, k, r[k], v, r)
					}
				}
				if p, _ := r["peer"].(string); !strings.HasPrefix(p, "127.0.0.1:") || p == pt.addr {
					t.Errorf("%s: peer %v", what, r["peer"])
				}
			}
			opened := lc.records(t, "iscsi: session opened")
			if len(opened) != 1 {
				t.Fatalf("%d session opened lines, want 1: %v", len(opened), opened)
			}
			check(opened[0], "session opened", map[string]any{"level": "INFO", "chap": false, "type": "Normal"})
			ended := lc.records(t, "iscsi: session ended")
			if len(ended) != 1 {
				t.Fatalf("%d session ended lines, want 1: %v", len(ended), ended)
			}
			check(ended[0], "session ended", map[string]any{"level": "INFO", "reason": "logout"})

			refused := lc.records(t, "iscsi: login refused")
			if len(refused) != 2 {
				t.Fatalf("%d login refused lines, want 2: %v", len(refused), refused)
			}
			reasons := map[string]string{}
			for _, r := range refused {
				if p, _ := r["peer"].(string); r["level"] != "WARN" || !strings.HasPrefix(p, "127.0.0.1:") || r["transport"] != x.name || r["err"] == nil {
					t.Errorf("login refused: %v", r)
				}
				ini, _ := r["initiator"].(string)
				reasons[ini+" "+r["target"].(string)] = r["reason"].(string)
			}
			if reasons[statsOther+" "+fuzzIQN] != "forbidden" || reasons[mgmtInitiator+" "+statsCHAPIQN] != "auth_failed" {
				t.Errorf("login refused reasons %v", reasons)
			}
			// One connection accepted line per connection (the session and
			// the two refusals), at debug level.
			if acc := lc.records(t, "iscsi: connection accepted"); len(acc) != 3 || acc[0]["level"] != "DEBUG" || acc[0]["transport"] != x.name {
				t.Errorf("connection accepted lines: %v", acc)
			}
		})
	}
}
