package nvmeof

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// captureConnectSQE is the Fabrics Connect SQE the Linux 6.1 nvme-rdma host
// sent over siw, captured in ../shared/lab/results/c-siw-mpa-capture.log
// (FPDU 0, SEND payload).
const captureConnectSQE = `
7f 40 00 00 01 00 00 00  00 00 00 00 00 00 00 00
00 00 00 00 00 00 00 00  00 58 18 05 75 0b 1f ff
00 04 00 01 ab 44 56 4f  00 00 00 00 1f 00 00 00
88 13 00 00 00 00 00 00  00 00 00 00 00 00 00 00`

func TestConnectSQECapture(t *testing.T) {
	want := unhex(t, captureConnectSQE, 0)
	if len(want) != SQESize {
		t.Fatalf("capture is %d bytes", len(want))
	}

	// Encoding the captured fields reproduces the capture byte for byte.
	got := make([]byte, SQESize)
	SQE(got).Connect().Encode(&ConnectFields{
		CID: 0,
		DPTR: SGLFields{
			Identifier: SGLKeyedInvalidate,
			Address:    0xff1f0b7505185800,
			Length:     1024,
			Key:        0x5644ab01,
		},
		RecFmt: 0,
		QID:    0,
		SQSize: 31,
		KATO:   5000,
	})
	checkBytes(t, "encoded Connect", got, want)

	// And parsing the capture yields them back.
	s, kind, err := ParseCommand(want, true)
	if err != nil {
		t.Fatalf("ParseCommand(capture): %v", err)
	}
	if kind != KindConnect {
		t.Errorf("kind = %v, want Connect", kind)
	}
	c := s.Connect()
	type fields struct {
		Opcode, Flags, FCType, CAttr uint8
		CID, RecFmt, QID, SQSize     uint16
		KATO                         uint32
		Dir                          Direction
		SGL                          SGLFields
		Invalidate                   bool
	}
	gotF := fields{s.Opcode(), s.Flags(), s.FCType(), c.CAttr(), s.CID(), c.RecFmt(), c.QID(), c.SQSize(),
		c.KATO(), s.Direction(), s.DPTR().Fields(), s.DPTR().Invalidate()}
	wantF := fields{0x7f, 0x40, 0x01, 0, 0, 0, 0, 31, 5000, DirHostToCtrl,
		SGLFields{Identifier: 0x4f, Address: 0xff1f0b7505185800, Length: 1024, Key: 0x5644ab01}, true}
	if d := cmp.Diff(wantF, gotF); d != "" {
		t.Errorf("parsed Connect (-want +got):\n%s", d)
	}
	if err := s.DPTR().CheckRDMA(true, 0); err != nil {
		t.Errorf("CheckRDMA(captured keyed SGL) = %v", err)
	}
}

func TestSQEGolden(t *testing.T) {
	keyed := SGLFields{Identifier: SGLKeyedInvalidate, Address: 0x1122334455667788, Length: 0x1000, Key: 0xdeadbeef}
	// The keyed descriptor as struct nvme_keyed_sgl_desc lays it out:
	// addr le64, length[3] le24, key[4] le32, type.
	keyedBytes := []byte{0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11, 0x00, 0x10, 0x00, 0xef, 0xbe, 0xad, 0xde, 0x4f}

	tests := []struct {
		name   string
		encode func(SQE)
		want   func() []byte
	}{{
		name: "read FUA",
		encode: func(s SQE) {
			s.RW().Encode(&RWFields{Opcode: IORead, CID: 0x1234, NSID: 1, DPTR: keyed,
				SLBA: 0x0102030405060708, NLB: 7, Control: ControlFUA, DSM: 0x22})
		},
		want: func() []byte {
			b := make([]byte, 64)
			at(b, 0, 0x02, 0x40, 0x34, 0x12, 0x01, 0, 0, 0) // opcode, flags, command_id, nsid
			at(b, 24, keyedBytes...)                        // dptr
			at(b, 40, 0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01)
			at(b, 48, 0x07, 0x00, 0x00, 0x40) // length, control (NVME_RW_FUA = 1<<14)
			at(b, 52, 0x22)                   // dsmgmt
			return b
		},
	}, {
		name: "write zeroes deallocate",
		encode: func(s SQE) {
			s.RW().Encode(&RWFields{Opcode: IOWriteZeroes, CID: 9, NSID: 2, SLBA: 100, NLB: 0xffff, Control: ControlDEAC})
		},
		want: func() []byte {
			b := make([]byte, 64)
			at(b, 0, 0x08, 0x40, 0x09, 0x00, 0x02)
			at(b, 40, 100)
			at(b, 48, 0xff, 0xff, 0x00, 0x02) // NVME_WZ_DEAC = 1<<9 in control
			return b
		},
	}, {
		name: "dataset management",
		encode: func(s SQE) {
			s.DSM().Encode(&DSMFields{CID: 3, NSID: 1, DPTR: SGLFields{Identifier: SGLInCapsule, Length: 32},
				NR: 1, Attributes: DSMDeallocate})
		},
		want: func() []byte {
			b := make([]byte, 64)
			at(b, 0, 0x09, 0x40, 0x03, 0x00, 0x01)
			at(b, 32, 32, 0, 0, 0, 0, 0, 0, 0x01) // struct nvme_sgl_desc: length le32, rsvd[3], type
			at(b, 40, 0x01)                       // nr (0-based)
			at(b, 44, 0x04)                       // attributes NVME_DSMGMT_AD
			return b
		},
	}, {
		name: "flush and keep alive through the common encoder",
		encode: func(s SQE) {
			s.Encode(&SQEFields{Opcode: AdminKeepAlive, Flags: FlagSGLMetaBuf, CID: 0x7fff,
				DPTR: SGLFields{Identifier: SGLKeyed}})
		},
		want: func() []byte {
			b := make([]byte, 64)
			at(b, 0, 0x18, 0x40, 0xff, 0x7f)
			at(b, 39, 0x40)
			return b
		},
	}, {
		name: "identify controller",
		encode: func(s SQE) {
			s.Identify().Encode(&IdentifyFields{CID: 1, DPTR: keyed, CNS: CNSController, CNTID: 0x0102, CSI: CSIZNS})
		},
		want: func() []byte {
			b := make([]byte, 64)
			at(b, 0, 0x06, 0x40, 0x01, 0x00)
			at(b, 24, keyedBytes...)
			at(b, 40, 0x01, 0x00, 0x02, 0x01) // cns, rsvd3, ctrlid
			at(b, 47, 0x02)                   // csi
			return b
		},
	}, {
		name: "get log page with NUMD split and LPO",
		encode: func(s SQE) {
			s.GetLogPage().Encode(&GetLogPageFields{CID: 2, NSID: NSIDAll, DPTR: keyed, LID: LogDiscovery,
				LSP: 0x7f, RAE: true, NUMD: 0x00012345, LSI: 0xabcd, LPO: 0x0000000100000400, CSI: 0})
		},
		want: func() []byte {
			b := make([]byte, 64)
			at(b, 0, 0x02, 0x40, 0x02, 0x00, 0xff, 0xff, 0xff, 0xff)
			at(b, 24, keyedBytes...)
			at(b, 40, 0x70, 0xff)             // lid, lsp with RAE (bit 15 of CDW10)
			at(b, 42, 0x45, 0x23, 0x01, 0x00) // numdl, numdu
			at(b, 46, 0xcd, 0xab)             // lsi
			at(b, 48, 0x00, 0x04, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00)
			return b
		},
	}, {
		name: "set features number of queues, saved",
		encode: func(s SQE) {
			s.Features().Encode(&FeaturesFields{Opcode: AdminSetFeatures, CID: 4, FID: FeatNumQueues, Save: true,
				CDW11: NumQueuesValue(3, 7)})
		},
		want: func() []byte {
			b := make([]byte, 64)
			at(b, 0, 0x09, 0x40, 0x04, 0x00)
			at(b, 40, 0x07, 0x00, 0x00, 0x80) // fid, SV = CDW10 bit 31
			at(b, 44, 0x03, 0x00, 0x07, 0x00) // NSQR 15:0, NCQR 31:16
			return b
		},
	}, {
		name: "get features KATO, default",
		encode: func(s SQE) {
			s.Features().Encode(&FeaturesFields{Opcode: AdminGetFeatures, CID: 5, FID: FeatKeepAliveTimer,
				Select: SelectDefault})
		},
		want: func() []byte {
			b := make([]byte, 64)
			at(b, 0, 0x0a, 0x40, 0x05, 0x00)
			at(b, 40, 0x0f, 0x01) // fid, SEL = CDW10 bits 10:8
			return b
		},
	}, {
		name:   "abort",
		encode: func(s SQE) { s.Abort().Encode(&AbortFields{CID: 6, SQID: 2, TargetCID: 0x55aa}) },
		want: func() []byte {
			b := make([]byte, 64)
			at(b, 0, 0x08, 0x40, 0x06, 0x00)
			at(b, 40, 0x02, 0x00, 0xaa, 0x55) // sqid, cid
			return b
		},
	}, {
		name: "property get CAP",
		encode: func(s SQE) {
			s.Property().Encode(&PropertyFields{FCType: FCTypePropertyGet, CID: 1, Size8: true, Offset: PropCAP})
		},
		want: func() []byte {
			b := make([]byte, 64)
			at(b, 0, 0x7f, 0x40, 0x01, 0x00, 0x04)
			at(b, 40, 0x01) // attrib: 8 bytes
			return b
		},
	}, {
		name: "property set CC",
		encode: func(s SQE) {
			s.Property().Encode(&PropertyFields{FCType: FCTypePropertySet, CID: 2, Offset: PropCC, Value: 0x00460001})
		},
		want: func() []byte {
			b := make([]byte, 64)
			at(b, 0, 0x7f, 0x40, 0x02, 0x00, 0x00)
			at(b, 44, 0x14, 0, 0, 0)             // offset NVME_REG_CC
			at(b, 48, 0x01, 0x00, 0x46, 0x00, 0) // value
			return b
		},
	}, {
		name:   "disconnect",
		encode: func(s SQE) { s.EncodeDisconnect(0x0203) },
		want: func() []byte {
			b := make([]byte, 64)
			at(b, 0, 0x7f, 0x40, 0x03, 0x02, 0x08)
			return b
		},
	}, {
		name: "authentication send",
		encode: func(s SQE) {
			s.Auth().Encode(&AuthFields{FCType: FCTypeAuthSend, CID: 7, DPTR: keyed, SECP: AuthProtocolDHCHAP,
				SPSP0: 0x01, SPSP1: 0x02, Length: 0x64})
		},
		want: func() []byte {
			b := make([]byte, 64)
			at(b, 0, 0x7f, 0x40, 0x07, 0x00, 0x05)
			at(b, 24, keyedBytes...)
			at(b, 40, 0x00, 0x01, 0x02, 0xe9, 0x64) // resv3, spsp0, spsp1, secp, tl
			return b
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := make([]byte, SQESize)
			for i := range got {
				got[i] = 0xa5 // Encode must overwrite every byte
			}
			tt.encode(SQE(got))
			checkBytes(t, "SQE", got, tt.want())
		})
	}
}

func TestSQEAccessors(t *testing.T) {
	b := make([]byte, SQESize)
	s := SQE(b)
	s.RW().Encode(&RWFields{Opcode: IOWrite, CID: 0xbeef, NSID: 5, SLBA: 1 << 40, NLB: 255,
		Control: ControlFUA | ControlLimitedRetry | 0x3<<10,
		DPTR:    SGLFields{Identifier: SGLInCapsule, Address: 0, Length: 4096}})
	rw := s.RW()
	if rw.SLBA() != 1<<40 || rw.NLB() != 255 || rw.Blocks() != 256 || !rw.FUA() || !rw.LimitedRetry() ||
		rw.PRINFO() != 3 || rw.DEAC() || s.CID() != 0xbeef || s.NSID() != 5 || s.Direction() != DirHostToCtrl {
		t.Errorf("write accessors: slba %d nlb %d blocks %d fua %v lr %v prinfo %d cid %#x nsid %d dir %v",
			rw.SLBA(), rw.NLB(), rw.Blocks(), rw.FUA(), rw.LimitedRetry(), rw.PRINFO(), s.CID(), s.NSID(), s.Direction())
	}
	s.SetCID(7)
	if s.CID() != 7 {
		t.Errorf("SetCID: CID = %d", s.CID())
	}

	s.GetLogPage().Encode(&GetLogPageFields{LID: LogSMART, NUMD: NUMDForLength(512), NSID: NSIDAll})
	if g := s.GetLogPage(); g.Length() != 512 || g.NUMD() != 127 || g.LID() != LogSMART || g.RAE() || g.LSP() != 0 {
		t.Errorf("get log page: len %d numd %d lid %d", g.Length(), g.NUMD(), g.LID())
	}
	if s.Direction() != DirCtrlToHost {
		t.Errorf("get log page direction = %v", s.Direction())
	}

	s.DSM().Encode(&DSMFields{NR: 255, Attributes: DSMDeallocate | DSMIntegralRead})
	if d := s.DSM(); d.Ranges() != 256 || d.DataLen() != 4096 || !d.Deallocate() {
		t.Errorf("dsm: ranges %d len %d dealloc %v", d.Ranges(), d.DataLen(), d.Deallocate())
	}
}

func TestParseCommandErrors(t *testing.T) {
	sqe := func(mod func(b []byte)) []byte {
		b := make([]byte, SQESize)
		b[1] = 0x40
		mod(b)
		return b
	}
	tests := []struct {
		name   string
		b      []byte
		admin  bool
		status Status
		loc    uint16
		kind   CommandKind
	}{
		{"admin identify", sqe(func(b []byte) { b[0] = 0x06 }), true, 0, 0, KindIdentify},
		{"admin keep alive", sqe(func(b []byte) { b[0] = 0x18 }), true, 0, 0, KindKeepAlive},
		{"admin AER", sqe(func(b []byte) { b[0] = 0x0c }), true, 0, 0, KindAsyncEventRequest},
		{"io read", sqe(func(b []byte) { b[0] = 0x02 }), false, 0, 0, KindRead},
		{"io flush", sqe(func(b []byte) { b[0] = 0x00 }), false, 0, 0, KindFlush},
		{"io compare", sqe(func(b []byte) { b[0] = 0x05 }), false, 0, 0, KindCompare},
		{"connect on io queue", sqe(func(b []byte) { b[0], b[4] = 0x7f, 0x01 }), false, 0, 0, KindConnect},
		{"property get", sqe(func(b []byte) { b[0], b[4] = 0x7f, 0x04 }), true, 0, 0, KindPropertyGet},
		{"disconnect on io queue", sqe(func(b []byte) { b[0], b[4] = 0x7f, 0x08 }), false, 0, 0, KindDisconnect},
		{"fused first", sqe(func(b []byte) { b[0], b[1] = 0x02, 0x41 }), false, 0x4002, 1, 0},
		{"PSDT PRP", sqe(func(b []byte) { b[0], b[1] = 0x02, 0x00 }), false, 0x4002, 1, 0},
		{"PSDT metaseg", sqe(func(b []byte) { b[0], b[1] = 0x02, 0x80 }), false, 0x4002, 1, 0},
		{"create IO SQ on fabrics", sqe(func(b []byte) { b[0] = 0x01 }), true, 0x4001, 0, 0},
		{"format NVM", sqe(func(b []byte) { b[0] = 0x80 }), true, 0x4001, 0, 0},
		{"identify opcode on io queue", sqe(func(b []byte) { b[0] = 0x06 }), false, 0x4001, 0, 0},
		{"write uncorrectable", sqe(func(b []byte) { b[0] = 0x04 }), false, 0x4001, 0, 0},
		{"unknown fctype", sqe(func(b []byte) { b[0], b[4] = 0x7f, 0x02 }), true, 0x4001, 4, 0},
		{"property set on io queue", sqe(func(b []byte) { b[0], b[4] = 0x7f, 0x00 }), false, 0x4001, 4, 0},
		{"disconnect on admin queue", sqe(func(b []byte) { b[0], b[4] = 0x7f, 0x08 }), true, 0x4001, 4, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, kind, err := ParseCommand(tt.b, tt.admin)
			if tt.status == 0 {
				if err != nil || kind != tt.kind {
					t.Fatalf("ParseCommand = %v, %v; want %v, nil", kind, err, tt.kind)
				}
				return
			}
			var ce *CommandError
			if !errors.As(err, &ce) {
				t.Fatalf("ParseCommand error = %v, want a *CommandError", err)
			}
			if ce.Status != tt.status || ce.Loc != tt.loc {
				t.Errorf("status %v at byte %d, want %v at byte %d", ce.Status, ce.Loc, tt.status, tt.loc)
			}
		})
	}

	_, _, err := ParseCommand(make([]byte, 63), true)
	var ce *CommandError
	if !errors.Is(err, errShortSQE) || errors.As(err, &ce) {
		t.Errorf("ParseCommand(63 bytes) = %v, want errShortSQE and no *CommandError", err)
	}
}

func TestCheckLBARange(t *testing.T) {
	tests := []struct {
		slba   uint64
		blocks uint32
		nsze   uint64
		ok     bool
	}{
		{0, 1, 1, true},
		{0, 2, 1, false},
		{1023, 1, 1024, true},
		{1024, 1, 1024, false},
		{^uint64(0), 2, ^uint64(0), false}, // slba+blocks overflows
		{2048, 0, 1024, false},
	}
	for _, tt := range tests {
		err := CheckLBARange(tt.slba, tt.blocks, tt.nsze)
		if (err == nil) != tt.ok {
			t.Errorf("CheckLBARange(%d, %d, %d) = %v, want ok %v", tt.slba, tt.blocks, tt.nsze, err, tt.ok)
		}
		var ce *CommandError
		if err != nil && (!errors.As(err, &ce) || ce.Status != StatusLBAOutOfRange|StatusDNR || ce.Loc != 40) {
			t.Errorf("CheckLBARange error = %v, want LBA Out of Range, DNR at byte 40", err)
		}
	}
}

func TestDSMRange(t *testing.T) {
	b := make([]byte, 2*DSMRangeSize)
	r, err := DSMRangeAt(b, 1)
	if err != nil {
		t.Fatal(err)
	}
	r.Encode(&DSMRangeFields{ContextAttributes: 0x01020304, Length: 8, SLBA: 0x1122334455667788})
	want := make([]byte, 32)
	at(want, 16, 0x04, 0x03, 0x02, 0x01, 0x08, 0, 0, 0, 0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11)
	checkBytes(t, "DSM range", b, want)
	if r.ContextAttributes() != 0x01020304 || r.Length() != 8 || r.SLBA() != 0x1122334455667788 {
		t.Errorf("DSM range fields: %#x %d %#x", r.ContextAttributes(), r.Length(), r.SLBA())
	}
	for _, i := range []int{-1, 2, 100} {
		if _, err := DSMRangeAt(b, i); !errors.Is(err, errShortDSMRange) {
			t.Errorf("DSMRangeAt(%d) = %v, want errShortDSMRange", i, err)
		}
	}
}

func TestAsyncEventAndFeatures(t *testing.T) {
	ns := AsyncEvent{Type: AsyncEventNotice, Info: NoticeNSChanged, LogPage: LogChangedNS}
	if v := ns.Value(); v != 0x00040002 {
		t.Errorf("namespace changed AEN = %#08x, want 0x00040002", v)
	}
	disc := AsyncEvent{Type: AsyncEventNotice, Info: NoticeDiscoveryChanged, LogPage: LogDiscovery}
	if v := disc.Value(); v != 0x0070f002 {
		t.Errorf("discovery changed AEN = %#08x, want 0x0070f002", v)
	}
	if got := ParseAsyncEvent(0x0070f002); got != disc {
		t.Errorf("ParseAsyncEvent = %+v", got)
	}
	if nsqr, ncqr := ParseNumQueues(0x007f0003); nsqr != 3 || ncqr != 127 {
		t.Errorf("ParseNumQueues = %d, %d", nsqr, ncqr)
	}

	ts := make([]byte, TimestampSize)
	if err := EncodeTimestamp(ts, 0x0000123456789abc, 0x03); err != nil {
		t.Fatal(err)
	}
	checkBytes(t, "timestamp", ts, []byte{0xbc, 0x9a, 0x78, 0x56, 0x34, 0x12, 0x03, 0x00})
	ms, attrs, err := ParseTimestamp(ts)
	if err != nil || ms != 0x123456789abc || attrs != 3 {
		t.Errorf("ParseTimestamp = %#x %d %v", ms, attrs, err)
	}
}

func TestLogPageRange(t *testing.T) {
	page := make([]byte, 512)
	for i := range page {
		page[i] = byte(i)
	}
	got, err := LogPageRange(page, 256, 1024)
	if err != nil || len(got) != 256 || got[0] != 0 || &got[0] != &page[256] {
		t.Errorf("LogPageRange(256, 1024): len %d err %v", len(got), err)
	}
	got, err = LogPageRange(page, 0, 16)
	if err != nil || len(got) != 16 {
		t.Errorf("LogPageRange(0, 16): len %d err %v", len(got), err)
	}
	if got, err := LogPageRange(page, 512, 4); err != nil || len(got) != 0 {
		t.Errorf("LogPageRange at the end: %d bytes, %v", len(got), err)
	}
	for _, lpo := range []uint64{2, 516, 1 << 63} {
		var ce *CommandError
		if _, err := LogPageRange(page, lpo, 4); !errors.As(err, &ce) || ce.Status != StatusInvalidField|StatusDNR || ce.Loc != 48 {
			t.Errorf("LogPageRange(lpo %d) = %v, want Invalid Field at byte 48", lpo, err)
		}
	}
}
