package nvmeof

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// testIdentifyController is filled the way Linux nvmet_execute_identify_ctrl
// fills it for an RDMA port with 4 KiB inline data.
func testIdentifyController() IdentifyController {
	return IdentifyController{
		VID:       0x1b36,
		SSVID:     0x1af4,
		SN:        "854aedb13661a909af57",
		MN:        "rdisk",
		FR:        "0.1",
		RAB:       6,
		IEEE:      0x001c2d,
		CMIC:      CMICMultiPort | CMICMultiCtrl | CMICANA,
		MDTS:      8,
		CNTLID:    0x0001,
		VER:       MakeVersion(1, 3, 0),
		OAES:      AENConfigNSAttr | AENConfigANAChange,
		CTRATT:    CTRATTHostID128 | CTRATTTBKAS,
		CNTRLTYPE: ControllerTypeIO,
		FGUID:     [16]byte{0: 0xf0, 15: 0x0f},
		CRDT1:     10,
		ACL:       3,
		AERL:      3,
		FRMW:      FRMWSlot1ReadOnly | 1<<FRMWSlotsShift,
		LPA:       LPASMARTPerNamespace | LPACommandEffects | LPAExtendedData,
		ELPE:      127,
		NPSS:      0,
		WCTEMP:    0x157,
		CCTEMP:    0x175,
		KAS:       10,
		ANATT:     10,
		ANACAP:    0x1f,
		ANAGRPMAX: 128,
		NANAGRPID: 128,
		SQES:      0x66,
		CQES:      0x44,
		MAXCMD:    128,
		NN:        1024,
		ONCS:      ONCSDSM | ONCSWriteZeroes | ONCSCompare,
		FUSES:     0,
		VWC:       VWCPresent,
		AWUN:      1,
		AWUPF:     2,
		NWPC:      1,
		ACWU:      3,
		SGLS:      SGLSByteAligned | SGLSKeyed | SGLSOffset,
		MNAN:      1024,
		SUBNQN:    testSubNQN,
		IOCCSZ:    (64 + 4096) / 16,
		IORCSZ:    1,
		ICDOFF:    0,
		FCATT:     0,
		MSDBD:     1,
		OFCS:      OFCSDisconnect,
		DCTYPE:    0,
		PSD:       []PowerState{{MaxPower: 0x9c4, EntryLatency: 0x10, ExitLatency: 0x4, RRT: 1, RRL: 2, RWT: 3, RWL: 4, Flags: 2}},
	}
}

func TestIdentifyControllerGolden(t *testing.T) {
	c := testIdentifyController()
	got := make([]byte, IdentifySize)
	for i := range got {
		got[i] = 0xcc
	}
	if err := c.Encode(got); err != nil {
		t.Fatal(err)
	}

	// Offsets from struct nvme_id_ctrl (include/linux/nvme.h), by hand.
	want := make([]byte, 4096)
	at(want, 0, 0x36, 0x1b, 0xf4, 0x1a)                                        // vid, ssvid
	atString(want, 4, "854aedb13661a909af57")                                  // sn[20]
	atString(want, 24, "rdisk"+strings.Repeat(" ", 35))                        // mn[40], space padded
	atString(want, 64, "0.1     ")                                             // fr[8]
	at(want, 72, 6, 0x2d, 0x1c, 0x00)                                          // rab, ieee[3] little endian
	at(want, 76, 0x0b, 8, 0x01, 0x00)                                          // cmic, mdts, cntlid
	at(want, 80, 0x00, 0x03, 0x01, 0x00)                                       // ver 1.3.0
	at(want, 92, 0x00, 0x09, 0x00, 0x00)                                       // oaes: bits 8, 11
	at(want, 96, 0x41, 0x00, 0x00, 0x00)                                       // ctratt: bits 0, 6
	at(want, 111, 1)                                                           // cntrltype
	at(want, 112, 0xf0)                                                        // fguid[0]
	at(want, 127, 0x0f)                                                        // fguid[15]
	at(want, 128, 10, 0)                                                       // crdt1
	at(want, 258, 3, 3, 0x03, 0x07, 127, 0)                                    // acl, aerl, frmw, lpa, elpe, npss
	at(want, 266, 0x57, 0x01, 0x75, 0x01)                                      // wctemp, cctemp
	at(want, 320, 10, 0)                                                       // kas
	at(want, 342, 10, 0x1f, 128, 0, 0, 0, 128, 0, 0, 0)                        // anatt, anacap, anagrpmax, nanagrpid
	at(want, 512, 0x66, 0x44, 128, 0)                                          // sqes, cqes, maxcmd
	at(want, 516, 0x00, 0x04, 0x00, 0x00)                                      // nn
	at(want, 520, 0x0d, 0x00, 0x00, 0x00, 0x00, 0x01)                          // oncs, fuses, fna, vwc
	at(want, 526, 1, 0, 2, 0, 0, 1, 3, 0)                                      // awun, awupf, icsvscc, nwpc, acwu
	at(want, 536, 0x05, 0x00, 0x10, 0x00)                                      // sgls: bits 0, 2, 20
	at(want, 540, 0x00, 0x04, 0x00, 0x00)                                      // mnan
	atString(want, 768, testSubNQN)                                            // subnqn
	at(want, 1792, 0x04, 0x01, 0, 0)                                           // ioccsz 260
	at(want, 1796, 1, 0, 0, 0)                                                 // iorcsz
	at(want, 1800, 0, 0, 0, 1, 1, 0, 0)                                        // icdoff, fcatt, msdbd, ofcs, dctype
	at(want, 2048, 0xc4, 0x09, 0, 2, 0x10, 0, 0, 0, 0x04, 0, 0, 0, 1, 2, 3, 4) // psd[0]
	checkBytes(t, "identify controller", got, want)

	p, err := ParseIdentifyController(want)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(c, p); d != "" {
		t.Errorf("parsed identify controller (-want +got):\n%s", d)
	}
}

func TestIdentifyControllerErrors(t *testing.T) {
	b := make([]byte, IdentifySize)
	for _, tt := range []struct {
		name  string
		mod   func(*IdentifyController)
		field string
	}{
		{"SN too long", func(c *IdentifyController) { c.SN = strings.Repeat("1", 21) }, "SN"},
		{"MN not ASCII", func(c *IdentifyController) { c.MN = "rdisk\u00e9" }, "MN"},
		{"FR control char", func(c *IdentifyController) { c.FR = "1\n" }, "FR"},
		{"SUBNQN too long", func(c *IdentifyController) { c.SUBNQN = strings.Repeat("n", 224) }, "SUBNQN"},
		{"33 power states", func(c *IdentifyController) { c.PSD = make([]PowerState, 33) }, "PSD"},
	} {
		c := testIdentifyController()
		tt.mod(&c)
		var fe *FieldError
		if err := c.Encode(b); !errors.As(err, &fe) || fe.Field != tt.field {
			t.Errorf("%s: Encode = %v, want a *FieldError for %s", tt.name, err, tt.field)
		}
	}
	c := testIdentifyController()
	if err := c.Encode(make([]byte, 4095)); !errors.Is(err, errShortBuffer) {
		t.Errorf("Encode(4095 bytes) = %v", err)
	}
	if _, err := ParseIdentifyController(make([]byte, 4095)); !errors.Is(err, errShortIdentify) {
		t.Errorf("ParseIdentifyController(4095 bytes) = %v", err)
	}
}

func TestIdentifyNamespaceGolden(t *testing.T) {
	n := IdentifyNamespace{
		NSZE: 0x200000, NCAP: 0x200000, NUSE: 0x100000,
		NSFEAT: NSFEATThin | NSFEATIOOpt, NLBAF: 1, FLBAS: 1,
		NMIC: NMICShared, DLFEAT: DLFEATReadZeroes | DLFEATWriteZeroesDeac,
		NAWUN: 7, NOIOB: 256, NVMCAP: 1 << 30, NPWG: 7, NOWS: 31,
		ANAGRPID: 1, NSATTR: NSATTRReadOnly, ENDGID: 1,
		NGUID: [16]byte{0x01, 0x02, 15: 0xff},
		EUI64: [8]byte{0xac, 0xde, 0x48, 0, 0, 0, 0, 0x01},
		LBAF:  []LBAFormat{{LBADS: 9}, {LBADS: 12, RP: 1}},
	}
	got := make([]byte, IdentifySize)
	if err := n.Encode(got); err != nil {
		t.Fatal(err)
	}
	// Offsets from struct nvme_id_ns, by hand.
	want := make([]byte, 4096)
	at(want, 0, 0, 0, 0x20, 0, 0, 0, 0, 0)  // nsze
	at(want, 8, 0, 0, 0x20, 0, 0, 0, 0, 0)  // ncap
	at(want, 16, 0, 0, 0x10, 0, 0, 0, 0, 0) // nuse
	at(want, 24, 0x11, 1, 1)                // nsfeat, nlbaf, flbas
	at(want, 30, 1)                         // nmic
	at(want, 33, 0x09, 7, 0)                // dlfeat, nawun
	at(want, 46, 0, 1)                      // noiob
	at(want, 48, 0, 0, 0, 0x40)             // nvmcap
	at(want, 64, 7, 0)                      // npwg
	at(want, 72, 31, 0)                     // nows
	at(want, 92, 1, 0, 0, 0)                // anagrpid
	at(want, 99, 1, 0, 0, 1, 0)             // nsattr, nvmsetid, endgid
	at(want, 104, 0x01, 0x02)               // nguid
	at(want, 119, 0xff)
	at(want, 120, 0xac, 0xde, 0x48, 0, 0, 0, 0, 0x01) // eui64
	at(want, 128, 0, 0, 9, 0, 0, 0, 12, 1)            // lbaf[0], lbaf[1]: ms, ds, rp
	checkBytes(t, "identify namespace", got, want)

	p, err := ParseIdentifyNamespace(want)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(n, p); d != "" {
		t.Errorf("parsed identify namespace (-want +got):\n%s", d)
	}
	if p.BlockSize() != 4096 {
		t.Errorf("BlockSize = %d", p.BlockSize())
	}
	inactive, err := ParseIdentifyNamespace(make([]byte, 4096))
	if err != nil || inactive.NSZE != 0 || inactive.BlockSize() != 0 || len(inactive.LBAF) != 1 {
		t.Errorf("inactive namespace: %+v %v", inactive, err)
	}
	if LBAFormatIndex(0x6f) != 0x3f || LBAFormatIndex(0x12) != 2 {
		t.Errorf("LBAFormatIndex")
	}
	if err := (&IdentifyNamespace{LBAF: make([]LBAFormat, 65)}).Encode(got); err == nil {
		t.Errorf("Encode(65 LBA formats) succeeded")
	}
}

func TestNamespaceIDs(t *testing.T) {
	ids := NamespaceIDs{
		UUID: [16]byte{0x11, 15: 0x1f}, HasUUID: true,
		NGUID: [16]byte{0x22, 15: 0x2f}, HasNGUID: true,
		EUI64: [8]byte{0x33, 7: 0x37}, HasEUI64: true,
		CSI: CSINVM, HasCSI: true,
	}
	got := make([]byte, IdentifySize)
	if err := ids.Encode(got); err != nil {
		t.Fatal(err)
	}
	// struct nvme_ns_id_desc: nidt, nidl, reserved[2], then the ID.
	want := make([]byte, 4096)
	at(want, 0, 3, 16, 0, 0, 0x11)
	at(want, 19, 0x1f)
	at(want, 20, 2, 16, 0, 0, 0x22)
	at(want, 39, 0x2f)
	at(want, 40, 1, 8, 0, 0, 0x33)
	at(want, 51, 0x37)
	at(want, 52, 4, 1, 0, 0, 0)
	checkBytes(t, "namespace descriptors", got, want)
	p, err := ParseNamespaceIDs(want)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(ids, p); d != "" {
		t.Errorf("parsed descriptors (-want +got):\n%s", d)
	}

	for _, tt := range []struct {
		name string
		b    []byte
		err  error
	}{
		{"NGUID of 8 bytes", unhex(t, "02 08 00 00 01 02 03 04 05 06 07 08", 64), errNSDescLength},
		{"CSI of 0 bytes", unhex(t, "04 00 00 00", 64), errNSDescLength},
		{"runs past the end", unhex(t, "03 10 00 00 01 02", 0), errNSDescOverflow},
		{"unknown type skipped", unhex(t, "07 02 00 00 aa bb 04 01 00 00 02", 64), nil},
	} {
		_, err := ParseNamespaceIDs(tt.b)
		if !errors.Is(err, tt.err) {
			t.Errorf("%s: %v, want %v", tt.name, err, tt.err)
		}
	}
}

func TestNSIDList(t *testing.T) {
	got := make([]byte, IdentifySize)
	if err := EncodeNSIDList(got, []uint32{1, 2, 0x100}); err != nil {
		t.Fatal(err)
	}
	want := make([]byte, 4096)
	at(want, 0, 1, 0, 0, 0, 2, 0, 0, 0, 0, 1, 0, 0)
	checkBytes(t, "NSID list", got, want)
	l, err := ParseNSIDList(want, nil)
	if err != nil || !cmp.Equal(l, []uint32{1, 2, 0x100}) {
		t.Errorf("ParseNSIDList = %v, %v", l, err)
	}
	for _, bad := range [][]uint32{{0}, {2, 2}, {3, 1}, {NSIDAll}, make([]uint32, 1025)} {
		if err := EncodeNSIDList(got, bad); err == nil {
			t.Errorf("EncodeNSIDList(%v...) succeeded", bad[:min(len(bad), 3)])
		}
	}
	if _, err := ParseNSIDList(unhex(t, "02 00 00 00 01 00 00 00", 0), nil); !errors.Is(err, errNSIDListUnordered) {
		t.Errorf("ParseNSIDList(unordered) = %v", err)
	}
	full := make([]uint32, 1024)
	for i := range full {
		full[i] = uint32(i + 1)
	}
	if err := EncodeNSIDList(got, full); err != nil {
		t.Fatal(err)
	}
	if l, err := ParseNSIDList(got, nil); err != nil || len(l) != 1024 {
		t.Errorf("full list: %d entries, %v", len(l), err)
	}
}

func TestIdentifyControllerNVM(t *testing.T) {
	c := IdentifyControllerNVM{VSL: 1, WZSL: 2, WUSL: 3, DMRL: 4, DMRSL: 0x01020304, DMSL: 0x1122334455667788}
	got := make([]byte, IdentifySize)
	if err := c.Encode(got); err != nil {
		t.Fatal(err)
	}
	want := make([]byte, 4096)
	at(want, 0, 1, 2, 3, 4, 0x04, 0x03, 0x02, 0x01, 0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11)
	checkBytes(t, "identify controller NVM", got, want)
	if p, err := ParseIdentifyControllerNVM(want); err != nil || p != c {
		t.Errorf("ParseIdentifyControllerNVM = %+v, %v", p, err)
	}
}

func TestIdentifyControllerCheckRDMAHost(t *testing.T) {
	c := testIdentifyController()
	if err := c.CheckRDMAHost(1, false); err != nil {
		t.Fatalf("CheckRDMAHost(nvmet-like) = %v", err)
	}
	for _, tt := range []struct {
		field string
		mod   func(*IdentifyController)
		disc  bool
	}{
		{"CNTLID", func(c *IdentifyController) { c.CNTLID = 2 }, false},
		{"KAS", func(c *IdentifyController) { c.KAS = 0 }, false},
		{"IOCCSZ", func(c *IdentifyController) { c.IOCCSZ = 3 }, false},
		{"IORCSZ", func(c *IdentifyController) { c.IORCSZ = 0 }, false},
		{"MAXCMD", func(c *IdentifyController) { c.MAXCMD = 0 }, false},
		{"ICDOFF", func(c *IdentifyController) { c.ICDOFF = 1 }, false},
		{"SGLS", func(c *IdentifyController) { c.SGLS = SGLSByteAligned }, false},
		{"", func(c *IdentifyController) { c.KAS = 0 }, true},                 // discovery controllers may lack KAS
		{"", func(c *IdentifyController) { c.IOCCSZ, c.IORCSZ = 0, 0 }, true}, // and capsule sizes (nvmet 6.1)
	} {
		c := testIdentifyController()
		tt.mod(&c)
		err := c.CheckRDMAHost(1, tt.disc)
		var fe *FieldError
		if tt.field == "" {
			if err != nil {
				t.Errorf("discovery controller: %v", err)
			}
		} else if !errors.As(err, &fe) || fe.Field != tt.field || !errors.Is(err, errIdentifyHost) {
			t.Errorf("%s: %v", tt.field, err)
		}
	}
}
