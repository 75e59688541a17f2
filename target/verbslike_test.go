package target

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rdisk/rdisk/iser"
	iserinit "github.com/rdisk/rdisk/iser/initiator"
	"github.com/rdisk/rdisk/nvmeof/host"
	"github.com/rdisk/rdisk/rdma"
	"github.com/rdisk/rdisk/rdma/iwarp"
)

// ownSpace is a provider whose RDMA/CM port space is its own, as a verbs
// device's: not an rdma.StreamProvider; its listener for port N takes TCP
// port N+1 underneath (the software iWARP provider runs over TCP).
type ownSpace struct{ p *iwarp.Provider }

func (o ownSpace) Name() string                    { return "verbs-like" }
func (o ownSpace) AllocPD() (rdma.PD, error)       { return o.p.AllocPD() }
func (o ownSpace) CreateCQ(n int) (rdma.CQ, error) { return o.p.CreateCQ(n) }
func (o ownSpace) Close() error                    { return o.p.Close() }
func (o ownSpace) Listen(ctx context.Context, addr string) (rdma.Listener, error) {
	return o.p.Listen(ctx, shifted(addr))
}

func shifted(addr string) string {
	h, port, _ := net.SplitHostPort(addr)
	n, _ := strconv.Atoi(port)
	return net.JoinHostPort(h, strconv.Itoa(n+1))
}

// TestNonStreamProvider: with a provider whose connections are not TCP
// streams, an rdma+tcp NVMe-oF port and the iSCSI portal each listen twice
// on one port number (TCP, and the provider's RDMA/CM): NVMe/TCP,
// NVMe/RDMA, iSCSI/TCP and iSER all log in.
func TestNonStreamProvider(t *testing.T) {
	t.Parallel()
	ip := newIWARP(t)
	defer ip.Close()
	var run *Running
	for try := 0; run == nil; try++ {
		// Port 0 would put the RDMA/CM side on a random port + 1: pick
		// free numbers.
		pick := func() string {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			_, port, _ := net.SplitHostPort(l.Addr().String())
			return port
		}
		js := strings.Replace(applyBefore, `"trtype": "tcp", "traddr": "127.0.0.1", "trsvcid": "0"`, `"trtype": "rdma+tcp", "traddr": "127.0.0.1", "trsvcid": "`+pick()+`"`, 1)
		js = strings.Replace(js, `"portals": ["127.0.0.1:0"]`, `"portals": ["127.0.0.1:`+pick()+`"]`, 1)
		c, err := Parse(strings.NewReader(js))
		if err != nil {
			t.Fatal(err)
		}
		run, err = Start(c, ownSpace{ip}, nil, nil)
		if err != nil && try == 20 {
			t.Fatal(err)
		}
		if run != nil && len(run.ISERPortals) != 1 {
			run.Close()
			run = nil
		}
	}
	defer run.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	addr := run.T.Port(1).Addr().String()
	hp := newIWARP(t)
	defer hp.Close()
	for _, tc := range []struct {
		tr   host.Transport
		addr string
	}{{host.TransportTCP, addr}, {host.TransportRDMA, shifted(addr)}} {
		c, err := host.Connect(ctx, hp, tc.addr, nqnA, host.Config{Transport: tc.tr, HostNQN: "nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-555555555555", HostID: [16]byte{1}, IOQueues: 1, QueueDepth: 8})
		if err != nil {
			t.Fatalf("NVMe-oF over %s: %v", tc.tr, err)
		}
		c.Close()
	}
	portal := run.ISCSIPortals[0].String()
	for _, tc := range []struct {
		tr   iser.Transport
		addr string
	}{{iser.TransportTCP, portal}, {iser.TransportISER, shifted(portal)}} {
		cfg := iserinit.Config{InitiatorName: "iqn.2026-12.io.rdisk:own"}
		if tc.tr == iser.TransportISER {
			cfg.Provider = hp
		}
		d, err := iserinit.Open(ctx, iserinit.URL{Transport: tc.tr, Host: "127.0.0.1", Port: portOf(t, tc.addr), Target: "iqn.2026-12.io.rdisk:t"}, cfg)
		if err != nil {
			t.Fatalf("iSCSI over %s: %v", tc.tr, err)
		}
		d.Close()
	}
}
