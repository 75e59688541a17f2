package target

import (
	"context"
	"log/slog"
	"net"
	"strconv"
	"testing"

	"github.com/rdisk/rdisk/backstore"
	"github.com/rdisk/rdisk/nvmeof"
	"github.com/rdisk/rdisk/rdma"
	"github.com/rdisk/rdisk/rdma/iwarp"
)

// cmSpace is a provider whose RDMA/CM port space is not TCP's, as a verbs
// device's: it is not an rdma.StreamProvider, and its listener for port
// N takes the TCP port N+shift underneath (the software iWARP provider
// runs over TCP), so it can share a port number with an NVMe/TCP
// listener.
type cmSpace struct {
	p     *iwarp.Provider
	shift int
}

func (c cmSpace) Name() string                    { return "cmspace" }
func (c cmSpace) AllocPD() (rdma.PD, error)       { return c.p.AllocPD() }
func (c cmSpace) CreateCQ(n int) (rdma.CQ, error) { return c.p.CreateCQ(n) }
func (c cmSpace) Close() error                    { return c.p.Close() }
func (c cmSpace) under(addr string) string {
	h, port, _ := net.SplitHostPort(addr)
	n, _ := strconv.Atoi(port)
	return net.JoinHostPort(h, strconv.Itoa(n+c.shift))
}
func (c cmSpace) Listen(ctx context.Context, addr string) (rdma.Listener, error) {
	return c.p.Listen(ctx, c.under(addr))
}

// TestBothWithoutStreams: an rdma+tcp port on a provider whose
// connections are not TCP streams listens twice on one port number, an
// RDMA/CM listener and a TCP one; hosts connect over each, and the
// discovery log lists both transports.
func TestBothWithoutStreams(t *testing.T) {
	t.Parallel()
	ip, _ := iwarp.New(iwarp.Config{})
	sp := cmSpace{p: ip, shift: 1}
	tg, err := New(Config{Provider: sp, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	sub, err := tg.AddSubsystem(SubsystemConfig{NQN: "nqn.2026-12.io.rdisk:pair", AllowAnyHost: true})
	if err != nil {
		t.Fatal(err)
	}
	disk, _ := backstore.NewMem(1<<20, 512)
	defer disk.Close()
	if err := sub.AddNamespace(NamespaceConfig{NSID: 1, Disk: disk}); err != nil {
		t.Fatal(err)
	}
	// Port 0 would put the RDMA listener on a random port + 1: pick a
	// free pair.
	var port *Port
	for try := 0; port == nil; try++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		port, err = tg.AddPort(PortConfig{ID: 1, Addr: addr, Transport: TransportBoth})
		if err != nil && try == 20 {
			t.Fatal(err)
		}
	}
	port.LinkSubsystem(sub)
	if got := port.ln.trTypes(); len(got) != 2 {
		t.Fatalf("transports %v", got)
	}
	tcpHost := mustHost(t, TransportTCP, port.Addr().String(), sub.NQN(), hostCfg(hostNQN))
	rdmaHost := mustHost(t, TransportRDMA, sp.under(port.Addr().String()), sub.NQN(), hostCfg(hostNQN2))
	if tcpHost.CNTLID() == rdmaHost.CNTLID() {
		t.Fatalf("two hosts, one controller ID %d", tcpHost.CNTLID())
	}
	// Each transport's discovery lists the port for that transport.
	for _, tc := range []struct {
		tr   Transport
		addr string
		want uint8
	}{{TransportTCP, port.Addr().String(), nvmeof.TrTypeTCP}, {TransportRDMA, sp.under(port.Addr().String()), nvmeof.TrTypeRDMA}} {
		disc := mustHost(t, tc.tr, tc.addr, nvmeof.DiscoveryNQN, hostCfg(hostNQN))
		log, err := disc.DiscoveryLog(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if len(log.Entries) != 1 || log.Entries[0].TrType != tc.want || log.Entries[0].TrSvcID != port.svc {
			t.Fatalf("discovery over %s: %+v", tc.tr, log.Entries)
		}
	}
	if err := tg.RemovePort(1); err != nil {
		t.Fatal(err)
	}
}
