//go:build verbs

package verbs

import "testing"

func TestDevices(t *testing.T) {
	devs, err := Devices()
	if err != nil {
		t.Fatal(err)
	}
	if devs == nil {
		t.Fatal("Devices returned a nil list")
	}
	for _, d := range devs {
		t.Logf("%s guid %s transport %s", d.Name, d.NodeGUID, d.Transport)
		if d.Name == "" || d.Transport == "" {
			t.Errorf("incomplete device %+v", d)
		}
		for _, p := range d.Ports {
			t.Logf("  port %d %s %s mtu %d netdev %q gids %v", p.Num, p.State, p.LinkLayer, p.MTU, p.NetDev, p.GIDs)
		}
	}
}

func TestFormatGUID(t *testing.T) {
	// Network byte order in memory: 00 11 22 ... on a little-endian host.
	if got := formatGUID(0x7766554433221100); got != "0011:2233:4455:6677" {
		t.Fatalf("formatGUID = %q", got)
	}
}
