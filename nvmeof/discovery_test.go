package nvmeof

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// labEntries are the two entries Linux nvmet served in
// ../shared/lab/results/b-nvmeof-rdma-tcp.log (nvme discover -t rdma).
func labEntries() []DiscoveryLogEntry {
	e := DiscoveryLogEntry{
		TrType: TrTypeRDMA, AdrFam: AdrFamIPv4, SubType: SubTypeCurrentDiscovery,
		TReq: TReqNotSpecified | TReqDisableSQFlow, PortID: 1, CNTLID: CNTLIDDynamic, ASQSZ: AdminQueueDepth,
		TrSvcID: "4420", SubNQN: DiscoveryNQN, TrAddr: "169.254.99.1",
		RDMAQPType: RDMAQPTypeConnected, RDMAPrType: RDMAPrTypeNotSpecified, RDMACMS: RDMACMSRDMACM,
	}
	e2 := e
	e2.SubType = SubTypeNVMe
	e2.SubNQN = "nqn.2024-01.io.lab:loop1"
	return []DiscoveryLogEntry{e, e2}
}

func TestDiscoveryLogGolden(t *testing.T) {
	entries := labEntries()
	got := make([]byte, DiscoveryLogSize(2))
	n, err := EncodeDiscoveryLog(got, 3, entries)
	if err != nil || n != 3072 {
		t.Fatalf("EncodeDiscoveryLog = %d, %v", n, err)
	}

	// struct nvmf_disc_rsp_page_hdr: genctr, numrec, recfmt, resv14[1006].
	want := make([]byte, 3072)
	at(want, 0, 3, 0, 0, 0, 0, 0, 0, 0, 2)
	// struct nvmf_disc_rsp_page_entry, twice.
	for i, sub := range []string{DiscoveryNQN, "nqn.2024-01.io.lab:loop1"} {
		e := want[1024*(i+1):]
		at(e, 0, 1, 1, byte(3-i), 0x04)          // trtype, adrfam, subtype, treq
		at(e, 4, 1, 0, 0xff, 0xff, 32, 0, 0, 0)  // portid, cntlid, asqsz, eflags
		atString(e, 32, "4420")                  // trsvcid[32]
		atString(e, 256, sub)                    // subnqn[256]
		atString(e, 512, "169.254.99.1")         // traddr[256]
		at(e, 768, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0) // tsas.rdma: qptype, prtype, cms, resv3[5], pkey
	}
	checkBytes(t, "discovery log", got, want)

	h, parsed, err := ParseDiscoveryLog(want)
	if err != nil {
		t.Fatal(err)
	}
	if h != (DiscoveryLogHeader{GenCtr: 3, NumRec: 2}) {
		t.Errorf("header = %+v", h)
	}
	if d := cmp.Diff(entries, parsed); d != "" {
		t.Errorf("parsed entries (-want +got):\n%s", d)
	}

	// A host reading only the header learns NUMREC and gets an error
	// telling it to read the rest.
	h, parsed, err = ParseDiscoveryLog(want[:1024])
	if !errors.Is(err, errTruncatedDiscLog) || h.NumRec != 2 || len(parsed) != 0 {
		t.Errorf("header only: %+v, %d entries, %v", h, len(parsed), err)
	}
	h, parsed, err = ParseDiscoveryLog(want[:2500])
	if !errors.Is(err, errTruncatedDiscLog) || len(parsed) != 1 {
		t.Errorf("one and a half entries: %d entries, %v", len(parsed), err)
	}
	if _, _, err := ParseDiscoveryLog(want[:1023]); !errors.Is(err, errShortLogPage) {
		t.Errorf("short header: %v", err)
	}
}

func TestDiscoveryLogSpacePadded(t *testing.T) {
	// SPDK pads TRSVCID and TRADDR with spaces; hosts must read both.
	b := make([]byte, DiscoveryLogEntrySize)
	at(b, 0, 1, 1, 2)
	copy(b[32:64], "4420"+strings.Repeat(" ", 28))
	copy(b[512:768], "10.0.0.1"+strings.Repeat(" ", 248))
	copy(b[256:], "nqn.x")
	e, err := ParseDiscoveryLogEntry(b)
	if err != nil || e.TrSvcID != "4420" || e.TrAddr != "10.0.0.1" || e.SubNQN != "nqn.x" {
		t.Errorf("space padded entry: %+v, %v", e, err)
	}
}

func TestDiscoveryLogEncodeErrors(t *testing.T) {
	b := make([]byte, DiscoveryLogSize(1))
	for _, tt := range []struct {
		name  string
		mod   func(*DiscoveryLogEntry)
		field string
	}{
		{"trsvcid too long", func(e *DiscoveryLogEntry) { e.TrSvcID = strings.Repeat("1", 33) }, "TRSVCID"},
		{"traddr control char", func(e *DiscoveryLogEntry) { e.TrAddr = "1.2.3.4\x00" }, "TRADDR"},
		{"subnqn too long", func(e *DiscoveryLogEntry) { e.SubNQN = strings.Repeat("n", 224) }, "SUBNQN"},
	} {
		e := labEntries()[:1]
		tt.mod(&e[0])
		var fe *FieldError
		if _, err := EncodeDiscoveryLog(b, 0, e); !errors.As(err, &fe) || fe.Field != tt.field {
			t.Errorf("%s: %v, want a *FieldError for %s", tt.name, err, tt.field)
		}
	}
	if _, err := EncodeDiscoveryLog(b[:2047], 0, labEntries()[:1]); !errors.Is(err, errShortBuffer) {
		t.Errorf("short buffer: %v", err)
	}
}
