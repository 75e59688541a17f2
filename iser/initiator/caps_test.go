package initiator

import (
	"context"
	"testing"
	"time"

	"github.com/rdisk/rdisk/iser"
	"github.com/rdisk/rdisk/rdma"
	"github.com/rdisk/rdisk/rdma/iwarp"
)

// noRemoteInvProvider declares that the peer cannot invalidate its keys
// (rdma.Caps.NoRemoteInvalidate), as the verbs provider does over RoCE.
type noRemoteInvProvider struct{ rdma.Provider }

func (noRemoteInvProvider) Caps() rdma.Caps { return rdma.Caps{NoRemoteInvalidate: true} }

// TestISERCMSendWithInv: the initiator's iSER CM request says it does not
// want Send with Invalidate exactly when its provider's keys cannot be
// invalidated by the peer.
func TestISERCMSendWithInv(t *testing.T) {
	for _, tc := range []struct {
		name  string
		noInv bool
	}{{"default", false}, {"no-remote-invalidate", true}} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := iwarp.New(iwarp.Config{})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			ln, err := p.Listen(ctx, "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			got := make(chan []byte, 1)
			go func() {
				req, err := ln.Accept(ctx)
				if err != nil {
					got <- nil
					return
				}
				got <- append([]byte(nil), req.PrivateData()...)
				req.Reject(nil)
			}()
			var prov rdma.Provider = p
			if tc.noInv {
				prov = noRemoteInvProvider{p}
			}
			if _, err := Login(ctx, iser.TransportISER, ln.Addr().String(), "iqn.2026-11.io.rdisk:t",
				Config{InitiatorName: "iqn.2026-11.io.rdisk:i", Provider: prov}); err == nil {
				t.Fatal("login through a rejecting listener succeeded")
			}
			pd := <-got
			cm, ok := iser.ParseISERCM(pd)
			if !ok {
				t.Fatalf("iSER CM request %x does not parse", pd)
			}
			if notSup := cm.Flags&iser.ISERSendWithInvNotSupported != 0; notSup != tc.noInv {
				t.Fatalf("iSER CM flags %#x: Send with Invalidate not supported = %v, want %v", cm.Flags, notSup, tc.noInv)
			}
		})
	}
}
