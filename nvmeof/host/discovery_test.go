package host

import (
	"strings"
	"testing"

	"github.com/rdisk/rdisk/nvmeof"
)

// fakeLog serves a discovery log that changes between reads: logs[i] is
// what the i-th read sees (the last one repeats).
type fakeLog struct {
	logs  [][]byte
	reads int
}

func (f *fakeLog) read(b []byte) error {
	l := f.logs[min(f.reads, len(f.logs)-1)]
	f.reads++
	clear(b)
	copy(b, l)
	return nil
}

func discLog(t testing.TB, genctr uint64, nqns ...string) []byte {
	var es []nvmeof.DiscoveryLogEntry
	for i, n := range nqns {
		es = append(es, nvmeof.DiscoveryLogEntry{TrType: nvmeof.TrTypeRDMA, AdrFam: nvmeof.AdrFamIPv4, SubType: nvmeof.SubTypeNVMe,
			PortID: uint16(i + 1), CNTLID: nvmeof.CNTLIDDynamic, ASQSZ: 32, TrSvcID: "4420", SubNQN: n, TrAddr: "10.0.0.1",
			RDMAQPType: nvmeof.RDMAQPTypeConnected, RDMAPrType: nvmeof.RDMAPrTypeNotSpecified, RDMACMS: nvmeof.RDMACMSRDMACM})
	}
	b := make([]byte, nvmeof.DiscoveryLogSize(len(es)))
	if _, err := nvmeof.EncodeDiscoveryLog(b, genctr, es); err != nil {
		t.Fatal(err)
	}
	return b
}

func TestReadDiscoveryLog(t *testing.T) {
	t.Parallel()
	a := discLog(t, 5, "nqn.a:1", "nqn.a:2")
	b := discLog(t, 6, "nqn.a:1", "nqn.a:2", "nqn.a:3")
	empty := discLog(t, 9)
	cases := []struct {
		name    string
		logs    [][]byte
		genctr  uint64
		entries int
		reads   int
		err     string
	}{
		{"stable", [][]byte{a}, 5, 2, 3, ""},
		{"empty", [][]byte{empty}, 9, 0, 1, ""},
		// The log grows between the header and the full read: the full
		// read's header differs, so read again.
		{"grew before the full read", [][]byte{a, b, b, b, b}, 6, 3, 5, ""},
		// It changes after the full read: the last header read differs.
		{"changed after the full read", [][]byte{a, a, b, b, b, b}, 6, 3, 6, ""},
		// NUMREC moves without GENCTR (a buggy target): read again.
		{"numrec changed", [][]byte{a, discLog(t, 5, "nqn.a:1"), a, a, a}, 5, 2, 5, ""},
		{"always changing", func() [][]byte {
			var ls [][]byte
			for g := range uint64(40) {
				ls = append(ls, discLog(t, g+1, "nqn.a:1"))
			}
			return ls
		}(), 0, 0, 0, "kept changing"},
	}
	for _, c := range cases {
		f := &fakeLog{logs: c.logs}
		got, err := readDiscoveryLog(f.read)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: %v, want an error about %q", c.name, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if got.GenCtr != c.genctr || len(got.Entries) != c.entries || f.reads != c.reads {
			t.Errorf("%s: genctr %d, %d entries after %d reads; want %d, %d after %d", c.name, got.GenCtr, len(got.Entries), f.reads, c.genctr, c.entries, c.reads)
		}
	}
	// Too many records, a bad record format.
	huge := discLog(t, 1)
	huge[8] = 0xff
	huge[9] = 0xff
	if _, err := readDiscoveryLog((&fakeLog{logs: [][]byte{huge}}).read); err == nil || !strings.Contains(err.Error(), "records") {
		t.Errorf("65535 records: %v", err)
	}
	badFmt := discLog(t, 1, "nqn.a:1")
	badFmt[16] = 1
	if _, err := readDiscoveryLog((&fakeLog{logs: [][]byte{badFmt}}).read); err == nil || !strings.Contains(err.Error(), "record format") {
		t.Errorf("record format 1: %v", err)
	}
}

// FuzzReadDiscoveryLog feeds arbitrary log pages, changing between reads:
// the reader must not panic, must stay within its read budget and, when it
// succeeds, return what the last consistent reads held.
func FuzzReadDiscoveryLog(f *testing.F) {
	a := discLog(f, 5, "nqn.a:1", "nqn.a:2")
	b := discLog(f, 6, "nqn.a:1")
	f.Add(a, b, uint8(1))
	f.Add(a, a, uint8(0))
	f.Add(b[:100], a, uint8(2))
	f.Fuzz(func(t *testing.T, first, second []byte, switchAt uint8) {
		reads := 0
		read := func(buf []byte) error {
			l := first
			if reads >= int(switchAt%8) {
				l = second
			}
			reads++
			clear(buf)
			copy(buf, l)
			return nil
		}
		got, err := readDiscoveryLog(read)
		if reads > 3*discoveryTries {
			t.Fatalf("%d reads", reads)
		}
		if err != nil {
			return
		}
		if uint64(len(got.Entries)) > maxDiscoveryRecords {
			t.Fatalf("%d entries", len(got.Entries))
		}
	})
}
