//go:build verbs

package verbs

import (
	"net/netip"
	"os"
	"testing"

	"github.com/rdisk/rdisk/rdma"
	"github.com/rdisk/rdisk/rdma/rdmatest"
)

// TestConformance runs the rdma conformance suite on an RDMA device. It
// skips without one. RDISK_VERBS_DEVICE picks the device (Config.Device);
// RDISK_VERBS_IP is the address of the device's network interface that
// replaces the suite's 127.0.0.1 (rdma_cm cannot bind loopback addresses
// to an RDMA device).
func TestConformance(t *testing.T) {
	devs, err := Devices()
	if err != nil {
		t.Fatal(err)
	}
	if len(devs) == 0 {
		t.Skip("no RDMA device")
	}
	if s := os.Getenv("RDISK_VERBS_IP"); s != "" {
		ip, err := netip.ParseAddr(s)
		if err != nil {
			t.Fatalf("RDISK_VERBS_IP: %v", err)
		}
		testLoopback = ip
	} else {
		t.Skip("RDISK_VERBS_IP (the RDMA interface's address) is not set")
	}
	dev := os.Getenv("RDISK_VERBS_DEVICE")
	rdmatest.Run(t, func(t *testing.T) rdma.Provider {
		p, err := New(Config{Device: dev})
		if err != nil {
			t.Fatal(err)
		}
		return p
	})
}
