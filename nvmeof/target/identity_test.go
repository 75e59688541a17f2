package target

import (
	"log/slog"
	"testing"

	"github.com/rdisk/rdisk/backstore"
	"github.com/rdisk/rdisk/nvmeof"
)

// TestStableIdentities: a target built again from the same configuration
// (a restart) presents the same controller serial and the same namespace
// NGUIDs and UUIDs; no two namespaces share one, and another subsystem gets
// other ones.
func TestStableIdentities(t *testing.T) {
	t.Parallel()
	type ids struct {
		serial      string
		nguid, uuid [2][16]byte
	}
	build := func(nqn string) ids {
		tg, err := New(Config{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		defer tg.Close()
		sub, err := tg.AddSubsystem(SubsystemConfig{NQN: nqn, AllowAnyHost: true})
		if err != nil {
			t.Fatal(err)
		}
		var out ids
		out.serial = sub.cfg.Serial
		for i, nsid := range []uint32{1, 2} {
			d, err := backstore.NewMem(1<<20, 512)
			if err != nil {
				t.Fatal(err)
			}
			if err := sub.AddNamespace(NamespaceConfig{NSID: nsid, Disk: d}); err != nil {
				t.Fatal(err)
			}
			n := sub.namespace(nsid)
			out.nguid[i], out.uuid[i] = n.cfg.NGUID, n.cfg.UUID
		}
		return out
	}
	a, b, other := build(testNQN), build(testNQN), build(testNQN+"-other")
	if a != b {
		t.Fatalf("identities changed across a restart:\n%+v\n%+v", a, b)
	}
	if len(a.serial) == 0 || len(a.serial) > 20 {
		t.Fatalf("serial %q", a.serial)
	}
	if a.nguid[0] == a.nguid[1] || a.uuid[0] == a.uuid[1] {
		t.Fatalf("two namespaces share an identity: %+v", a)
	}
	if a.serial == other.serial || a.nguid[0] == other.nguid[0] || a.uuid[0] == other.uuid[0] {
		t.Fatalf("two subsystems share an identity: %+v %+v", a, other)
	}
	if v := a.uuid[0][6] >> 4; v != 8 || a.uuid[0][8]&0xc0 != 0x80 {
		t.Fatalf("UUID %x: version %d / variant %#x, want 8 / RFC 9562", a.uuid[0], v, a.uuid[0][8]&0xc0)
	}
}

// TestReadOnlyNamespace: a write-protected disk is reported so in Identify
// Namespace (NSATTR bit 0), so hosts mount it read-only, and writes to it
// fail with Namespace Is Write Protected.
func TestReadOnlyNamespace(t *testing.T) {
	t.Parallel()
	m, err := backstore.NewMem(1<<20, 512)
	if err != nil {
		t.Fatal(err)
	}
	n := &Namespace{cfg: NamespaceConfig{Disk: m}, nsze: 2048, lbads: 9}
	if id := (&controller{}).identifyNamespace(n); id.NSATTR&nvmeof.NSATTRReadOnly != 0 {
		t.Fatalf("writable disk reported write protected: NSATTR %#x", id.NSATTR)
	}
	m.SetReadOnly(true)
	if id := (&controller{}).identifyNamespace(n); id.NSATTR&nvmeof.NSATTRReadOnly == 0 {
		t.Fatalf("read-only disk not reported write protected: NSATTR %#x", id.NSATTR)
	}
	if st := ioStatus(m.WriteAt(make([]byte, 512), 0, 0), true); st != nvmeof.StatusNamespaceWriteProtected.WithDNR() {
		t.Fatalf("write to a read-only disk: %v", st)
	}
}
