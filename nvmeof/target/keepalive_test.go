package target

import (
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rdisk/rdisk/nvmeof"
	"github.com/rdisk/rdisk/rdma/iwarp"
)

// countingTransport is a fuzzTransport that counts disconnects.
type countingTransport struct {
	fuzzTransport
	disconnects atomic.Int32
}

func (c *countingTransport) disconnect() { c.disconnects.Add(1) }

// TestKeepAliveTimer checks the controller's keep-alive enforcement on
// fake time (synctest): traffic within KATO keeps the controller, silence
// for KATO tears it down, frees its ID and disconnects its queues.
func TestKeepAliveTimer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, err := iwarp.New(iwarp.Config{})
		if err != nil {
			t.Fatal(err)
		}
		tg, err := New(Config{Provider: p})
		if err != nil {
			t.Fatal(err)
		}
		defer tg.Close()
		sub, err := tg.AddSubsystem(SubsystemConfig{NQN: testNQN, AllowAnyHost: true})
		if err != nil {
			t.Fatal(err)
		}
		port := &Port{t: tg, cfg: PortConfig{ID: 1, MaxQueueSize: 128, MaxIOQueues: 4}}
		tr := &countingTransport{}
		q := newSQ(port, 0, 32, 64, tr)
		defer q.close()
		c := &controller{t: tg, sub: sub, port: port, hostNQN: hostNQN, maxQ: 4,
			queues: map[uint16]*sq{0: q}, wce: true, features: map[uint8]uint32{}, csts: nvmeof.CSTSReady}
		id, err := sub.allocController(c)
		if err != nil {
			t.Fatal(err)
		}
		c.cntlid = id
		q.ctrl = c
		c.mu.Lock()
		c.kato = 2 * time.Second
		c.armKeepAliveLocked()
		c.mu.Unlock()

		for range 5 { // 5 s of traffic every second
			time.Sleep(time.Second)
			c.traffic()
		}
		synctest.Wait()
		if sub.controller(id) == nil || tr.disconnects.Load() != 0 {
			t.Fatal("controller torn down although the host kept sending within KATO")
		}
		time.Sleep(2*time.Second + time.Millisecond)
		synctest.Wait()
		if sub.controller(id) != nil {
			t.Fatal("controller ID still allocated after KATO without traffic")
		}
		if n := tr.disconnects.Load(); n != 1 {
			t.Fatalf("admin queue disconnected %d times, want 1", n)
		}
	})
}
