package host

import (
	"errors"
	"testing"

	"github.com/rdisk/rdisk/blockdev"
	"github.com/rdisk/rdisk/nvmeof"
)

func TestDiskID(t *testing.T) {
	t.Parallel()
	const nqn = "nqn.2026-11.io.rdisk:x"
	nguid := [16]byte{0: 0xab, 15: 1}
	eui := [8]byte{0: 0xcd, 7: 2}
	uuid := [16]byte{0: 0xef, 15: 3}
	for _, c := range []struct {
		name string
		id   nvmeof.IdentifyNamespace
		ids  *nvmeof.NamespaceIDs
		want string
	}{
		{"nguid first", nvmeof.IdentifyNamespace{NGUID: nguid, EUI64: eui}, &nvmeof.NamespaceIDs{UUID: uuid, HasUUID: true},
			nqn + "/ab000000000000000000000000000001"},
		{"eui-64", nvmeof.IdentifyNamespace{EUI64: eui}, &nvmeof.NamespaceIDs{UUID: uuid, HasUUID: true}, nqn + "/cd00000000000002"},
		{"nguid from the descriptors", nvmeof.IdentifyNamespace{EUI64: eui}, &nvmeof.NamespaceIDs{NGUID: nguid, HasNGUID: true},
			nqn + "/ab000000000000000000000000000001"},
		{"uuid", nvmeof.IdentifyNamespace{}, &nvmeof.NamespaceIDs{UUID: uuid, HasUUID: true}, nqn + "/ef000000000000000000000000000003"},
		{"none", nvmeof.IdentifyNamespace{}, nil, ""},
	} {
		if got := diskID(nqn, &c.id, c.ids); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

func TestPathAccess(t *testing.T) {
	t.Parallel()
	for st, want := range map[nvmeof.Status]blockdev.AccessState{
		nvmeof.StatusANAInaccessible:          blockdev.AccessInaccessible,
		nvmeof.StatusANAPersistentLoss:        blockdev.AccessPersistentLoss,
		nvmeof.StatusANATransition:            blockdev.AccessTransitioning,
		nvmeof.StatusInternalPathError:        blockdev.AccessInaccessible,
		nvmeof.StatusHostPathError | 0x1000:   blockdev.AccessInaccessible,
		nvmeof.StatusANATransition.WithDNR():  blockdev.AccessTransitioning,
		nvmeof.StatusANAInaccessible | 0x0800: blockdev.AccessInaccessible,
	} {
		if got := pathAccess(st); got != want {
			t.Errorf("%v: %v, want %v", st, got, want)
		}
	}
	for s, want := range map[nvmeof.ANAState]blockdev.AccessState{
		nvmeof.ANAOptimized: blockdev.AccessOptimized, nvmeof.ANANonOptimized: blockdev.AccessNonOptimized,
		nvmeof.ANAInaccessible: blockdev.AccessInaccessible, nvmeof.ANAPersistentLoss: blockdev.AccessPersistentLoss,
		nvmeof.ANAChange: blockdev.AccessTransitioning, 0: blockdev.AccessUnknown,
	} {
		if got := accessOf(s); got != want {
			t.Errorf("%v: %v, want %v", s, got, want)
		}
	}
	r := &blockdev.Request{}
	r.Done = func(*blockdev.Request) {}
	completeIO(r, nil, "read", 1, nvmeof.StatusANAInaccessible, nil)
	pe, _ := r.Err.(*blockdev.PathError)
	if pe == nil || pe.State != blockdev.AccessInaccessible || !errors.Is(r.Err, blockdev.ErrPath) || !errors.Is(r.Err, blockdev.ErrIO) {
		t.Errorf("completion error %v", r.Err)
	}
}
