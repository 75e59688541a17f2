package target

import (
	"context"
	"testing"
	"time"

	"github.com/rdisk/rdisk/iser"
	"github.com/rdisk/rdisk/iser/initiator"
	"github.com/rdisk/rdisk/rdma/iwarp"
	"github.com/rdisk/rdisk/scsi"
)

// TestServeRDMA: iSER connection requests from an RDMA/CM listener (as a
// verbs device's, beside the TCP portal) log in and run commands; Drain
// closes that listener too.
func TestServeRDMA(t *testing.T) {
	t.Parallel()
	tg := newTestTarget(t, nil) // no stream provider: no demux on a TCP portal
	p, err := iwarp.New(iwarp.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ln, err := p.Listen(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- tg.ServeRDMA(ctx, p, ln) }()
	pt := &portal{tg: tg, addr: ln.Addr().String()}
	s := pt.mustLogin(t, iser.TransportISER, fuzzIQN, pt.config(t, "iqn.2026-12.io.rdisk:serverdma"))
	cmd := &initiator.Command{CDB: []byte{scsi.OpReportLUNs, 0, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0}, DataIn: make([]byte, 4096)}
	execute(t, s, cmd)
	if cmd.Status != scsi.StatusGood {
		t.Fatalf("REPORT LUNS over iSER through ServeRDMA: %v", cmd.Status)
	}
	if st := tg.Stats(); st.Connections["iser"] != 1 || st.Logins != 1 {
		t.Fatalf("stats: %+v", st)
	}
	s.Close()
	dctx, dcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer dcancel()
	if err := tg.Drain(dctx); err != nil {
		t.Fatalf("Drain: %v", err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("ServeRDMA: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("ServeRDMA did not return after Drain")
	}
}
