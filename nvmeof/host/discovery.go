package host

import (
	"context"
	"fmt"

	"github.com/rdisk/rdisk/nvmeof"
	"github.com/rdisk/rdisk/rdma"
)

// Discover connects to the discovery controller at addr ("host:port"),
// reads its discovery log and disconnects.
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

// EntryURL returns the nvme:// URL of a discovery log entry's subsystem, or
// false when the entry is not an RDMA entry over IP (rdisk speaks only
// NVMe/RDMA).
func EntryURL(e *nvmeof.DiscoveryLogEntry) (URL, bool) {
	if e.TrType != nvmeof.TrTypeRDMA || (e.AdrFam != nvmeof.AdrFamIPv4 && e.AdrFam != nvmeof.AdrFamIPv6) {
		return URL{}, false
	}
	u := URL{Host: e.TrAddr, Port: DefaultPort, SubNQN: e.SubNQN}
	if _, err := fmt.Sscanf(e.TrSvcID, "%d", &u.Port); err != nil || u.Port <= 0 || u.Port > 65535 {
		return URL{}, false
	}
	return u, true
}
