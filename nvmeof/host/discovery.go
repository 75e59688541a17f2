package host

import (
	"context"
	"fmt"

	"github.com/rdisk/rdisk/nvmeof"
	"github.com/rdisk/rdisk/rdma"
)

// Discover connects to the discovery controller at addr ("host:port") over
// Config.Transport (p may be nil for TCP), reads its discovery log and
// disconnects.
func Discover(ctx context.Context, p rdma.Provider, addr string, cfg Config) (*DiscoveryLog, error) {
	c, err := Connect(ctx, p, addr, nvmeof.DiscoveryNQN, cfg)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	log, err := c.DiscoveryLog(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the discovery log of %s: %w", addr, err)
	}
	return log, nil
}

// EntryURL returns the URL of a discovery log entry's subsystem: nvme://
// for an RDMA entry, nvme+tcp:// for a TCP one (without TLS: rdisk speaks
// none), or false when the entry is neither over IP.
func EntryURL(e *nvmeof.DiscoveryLogEntry) (URL, bool) {
	if e.AdrFam != nvmeof.AdrFamIPv4 && e.AdrFam != nvmeof.AdrFamIPv6 {
		return URL{}, false
	}
	u := URL{Host: e.TrAddr, Port: DefaultPort, SubNQN: e.SubNQN}
	switch e.TrType {
	case nvmeof.TrTypeRDMA:
		u.Transport = TransportRDMA
	case nvmeof.TrTypeTCP:
		if e.RDMAQPType != tcpSecTypeNone { // TSAS SECTYPE
			return URL{}, false
		}
		u.Transport = TransportTCP
	default:
		return URL{}, false
	}
	if _, err := fmt.Sscanf(e.TrSvcID, "%d", &u.Port); err != nil || u.Port <= 0 || u.Port > 65535 {
		return URL{}, false
	}
	return u, true
}

// tcpSecTypeNone is the TCP TSAS SECTYPE of an entry without TLS
// (NVMF_TCP_SECTYPE_NONE).
const tcpSecTypeNone = 0
