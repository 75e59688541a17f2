package nvmeof

import (
	"errors"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Native fuzz targets, one per parser. Each checks that parsing never
// panics, that failures carry the right error types, and that what parses
// survives an encode and a second parse unchanged.

func FuzzParseCommand(f *testing.F) {
	f.Add(unhex(f, captureConnectSQE, 0), true)
	f.Add(unhex(f, captureConnectSQE, 0), false)
	for _, op := range []byte{0x00, 0x01, 0x02, 0x05, 0x08, 0x09} {
		b := make([]byte, SQESize+512)
		b[0], b[1], b[39] = op, 0x40, 0x01
		b[32] = 0x00
		b[33] = 0x02 // in-capsule length 512
		f.Add(b, false)
	}
	for _, op := range []byte{0x02, 0x06, 0x08, 0x09, 0x0a, 0x0c, 0x18} {
		b := make([]byte, SQESize)
		b[0], b[1], b[39] = op, 0x40, 0x4f
		f.Add(b, true)
	}
	for _, ft := range []byte{0x00, 0x04, 0x05, 0x06, 0x08, 0x02} {
		b := make([]byte, SQESize)
		b[0], b[1], b[4] = 0x7f, 0x40, ft
		f.Add(b, ft != 0x08)
	}
	f.Add(make([]byte, 63), true)
	f.Add([]byte{0x02, 0x41}, false)

	f.Fuzz(func(t *testing.T, b []byte, admin bool) {
		s, kind, err := ParseCommand(b, admin)
		if err != nil {
			var ce *CommandError
			if errors.As(err, &ce) {
				if !ce.Status.DNR() || ce.Loc >= SQESize || kind != KindUnknown {
					t.Fatalf("bad *CommandError %v (loc %d, kind %v)", ce, ce.Loc, kind)
				}
			} else if len(b) >= SQESize {
				t.Fatalf("full SQE failed without a *CommandError: %v", err)
			}
			return
		}
		if kind == KindUnknown || kind.String() == "" {
			t.Fatalf("success with kind %v", kind)
		}
		// Every view is safe on every parsed SQE.
		_ = s.Direction().String()
		rw := s.RW()
		_, _, _, _, _ = rw.SLBA(), rw.Blocks(), rw.FUA(), rw.DEAC(), rw.PRINFO()
		_, _, _ = rw.RefTag(), rw.AppTag(), rw.AppMask()
		_, _ = s.DSM().DataLen(), s.DSM().Deallocate()
		_, _, _ = s.Identify().CNS(), s.Identify().CNTID(), s.Identify().CSI()
		g := s.GetLogPage()
		_, _, _, _, _ = g.Length(), g.LPO(), g.LSP(), g.RAE(), g.LSI()
		_, _, _ = s.Features().FID(), s.Features().Save(), s.Features().Select()
		_, _ = s.Abort().SQID(), s.Abort().TargetCID()
		c := s.Connect()
		_, _, _, _, _ = c.RecFmt(), c.QID(), c.SQSize(), c.CAttr(), c.KATO()
		_, _ = s.Property().Size()
		_, _ = s.Property().Offset(), s.Property().Value()
		_, _ = s.Auth().SECP(), s.Auth().Length()
		_ = s.DisconnectRecFmt()

		inCapsule := uint32(len(b) - SQESize)
		if err := s.DPTR().CheckRDMA(s.Direction() == DirHostToCtrl, inCapsule); err != nil {
			var ce *CommandError
			if !errors.As(err, &ce) || !ce.Status.DNR() {
				t.Fatalf("CheckRDMA error %v is not a DNR *CommandError", err)
			}
		} else if s.DPTR().Type() == SGLTypeDataBlock {
			sgl := s.DPTR()
			if sgl.Address()+uint64(sgl.Length()) > uint64(inCapsule) {
				t.Fatalf("accepted in-capsule SGL %+v past %d bytes", sgl.Fields(), inCapsule)
			}
		}

		// Round trip through the common encoder.
		want := SQEFields{Opcode: s.Opcode(), Flags: s.Flags(), CID: s.CID(), NSID: s.NSID(),
			CDW2: s.CDW2(), CDW3: s.CDW3(), MPTR: s.MPTR(), DPTR: s.DPTR().Fields(),
			CDW10: s.CDW10(), CDW11: s.CDW11(), CDW12: s.CDW12(), CDW13: s.CDW13(), CDW14: s.CDW14(), CDW15: s.CDW15()}
		out := make([]byte, SQESize)
		SQE(out).Encode(&want)
		s2, kind2, err := ParseCommand(out, admin)
		if err != nil || kind2 != kind {
			t.Fatalf("re-encoded SQE: kind %v, %v", kind2, err)
		}
		got := SQEFields{Opcode: s2.Opcode(), Flags: s2.Flags(), CID: s2.CID(), NSID: s2.NSID(),
			CDW2: s2.CDW2(), CDW3: s2.CDW3(), MPTR: s2.MPTR(), DPTR: s2.DPTR().Fields(),
			CDW10: s2.CDW10(), CDW11: s2.CDW11(), CDW12: s2.CDW12(), CDW13: s2.CDW13(), CDW14: s2.CDW14(), CDW15: s2.CDW15()}
		if d := cmp.Diff(want, got); d != "" {
			t.Fatalf("SQE round trip (-want +got):\n%s", d)
		}

		// Round trip through the typed encoders.
		switch kind {
		case KindRead, KindWrite, KindCompare, KindWriteZeroes:
			rf := RWFields{Opcode: s.Opcode(), CID: s.CID(), NSID: s.NSID(), DPTR: s.DPTR().Fields(),
				SLBA: rw.SLBA(), NLB: rw.NLB(), Control: rw.Control(), DSM: rw.DSM()}
			SQE(out).RW().Encode(&rf)
			r2 := SQE(out).RW()
			if r2.SLBA() != rf.SLBA || r2.NLB() != rf.NLB || r2.Control() != rf.Control || r2.DSM() != rf.DSM ||
				r2.CID() != rf.CID || r2.NSID() != rf.NSID || r2.DPTR().Fields() != rf.DPTR {
				t.Fatalf("RW round trip mismatch")
			}
		case KindConnect:
			cf := ConnectFields{CID: s.CID(), DPTR: s.DPTR().Fields(), RecFmt: c.RecFmt(), QID: c.QID(),
				SQSize: c.SQSize(), CAttr: c.CAttr(), KATO: c.KATO()}
			SQE(out).Connect().Encode(&cf)
			c2 := SQE(out).Connect()
			got := ConnectFields{CID: c2.CID(), DPTR: c2.DPTR().Fields(), RecFmt: c2.RecFmt(), QID: c2.QID(),
				SQSize: c2.SQSize(), CAttr: c2.CAttr(), KATO: c2.KATO()}
			if got != cf {
				t.Fatalf("Connect round trip: %+v != %+v", got, cf)
			}
		case KindGetLogPage:
			gf := GetLogPageFields{CID: s.CID(), NSID: s.NSID(), DPTR: s.DPTR().Fields(), LID: g.LID(), LSP: g.LSP(),
				RAE: g.RAE(), NUMD: g.NUMD(), LSI: g.LSI(), LPO: g.LPO(), CSI: g.CSI()}
			SQE(out).GetLogPage().Encode(&gf)
			g2 := SQE(out).GetLogPage()
			if g2.NUMD() != gf.NUMD || g2.LPO() != gf.LPO || g2.LID() != gf.LID || g2.LSP() != gf.LSP ||
				g2.RAE() != gf.RAE || g2.LSI() != gf.LSI || g2.CSI() != gf.CSI {
				t.Fatalf("Get Log Page round trip mismatch")
			}
		}
	})
}

func FuzzSGL(f *testing.F) {
	f.Add(unhex(f, "00 58 18 05 75 0b 1f ff  00 04 00 01 ab 44 56 4f", 0), true, uint32(0))
	f.Add(unhex(f, "00 00 00 00 00 00 00 00  00 10 00 00 00 00 00 01", 0), true, uint32(4096))
	f.Add(unhex(f, "00 fe ff ff ff ff ff ff  00 10 00 00 00 00 00 01", 0), true, uint32(4096))
	f.Add(unhex(f, "00 00 00 00 00 00 00 00  00 00 00 00 00 00 00 40", 0), false, uint32(0))
	f.Add(unhex(f, "00 00 00 00 00 00 00 00  00 00 00 00 00 00 00 5a", 0), false, uint32(0))
	f.Add([]byte{1, 2, 3}, false, uint32(0))
	f.Fuzz(func(t *testing.T, b []byte, write bool, inCapsule uint32) {
		s, err := ParseSGL(b)
		if err != nil {
			if len(b) >= SGLSize {
				t.Fatalf("ParseSGL(%d bytes) = %v", len(b), err)
			}
			return
		}
		if err := s.CheckRDMA(write, inCapsule); err != nil {
			var ce *CommandError
			if !errors.As(err, &ce) {
				t.Fatalf("CheckRDMA error %v is not a *CommandError", err)
			}
			switch ce.Status {
			case StatusInvalidField | StatusDNR, StatusSGLInvalidType | StatusDNR, StatusSGLInvalidOffset | StatusDNR:
			default:
				t.Fatalf("CheckRDMA status %v", ce.Status)
			}
		} else {
			switch id := s.Identifier(); {
			case id == SGLKeyed || id == SGLKeyedInvalidate:
			case id == SGLInCapsule && write && s.Address() <= uint64(inCapsule) &&
				uint64(s.Length()) <= uint64(inCapsule)-s.Address():
			default:
				t.Fatalf("CheckRDMA accepted %+v (write %v, %d in capsule)", s.Fields(), write, inCapsule)
			}
		}
		want := s.Fields()
		out := make([]byte, SGLSize)
		SGL(out).Encode(&want)
		if got := SGL(out).Fields(); got != want {
			t.Fatalf("SGL round trip: %+v != %+v", got, want)
		}
	})
}

func FuzzCQE(f *testing.F) {
	f.Add(unhex(f, "01 00 00 00 00 00 00 00  01 00 00 00 00 00 00 00", 0))
	f.Add(unhex(f, "00 00 00 00 00 00 00 00  00 00 01 00 09 00 0b c5", 0))
	f.Add(unhex(f, "ff ff ff ff ff ff ff ff  ff ff ff ff ff ff ff ff", 0))
	f.Add([]byte{0})
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := ParseCQE(b)
		if err != nil {
			if len(b) >= CQESize {
				t.Fatalf("ParseCQE(%d bytes) = %v", len(b), err)
			}
			return
		}
		fields := c.Fields()
		_ = fields.Status.String()
		_, _ = ParseConnectInvalidParam(c.DW0())
		_ = ParseAsyncEvent(c.DW0())
		out := make([]byte, CQESize)
		CQE(out).Encode(&fields)
		checkBytes(t, "CQE round trip", out, b[:CQESize])
	})
}

func FuzzCMPrivateData(f *testing.F) {
	f.Add(unhex(f, captureCMRequest, 32), uint16(8), uint16(128))
	f.Add(unhex(f, captureCMAccept, 32), uint16(0), uint16(0))
	f.Add(unhex(f, "00 00 01 00 80 00 7f 00", 56), uint16(8), uint16(128))
	f.Add([]byte{0, 0, 4, 0}, uint16(1), uint16(32))
	f.Add([]byte{}, uint16(1), uint16(32))
	f.Fuzz(func(t *testing.T, pd []byte, maxQID, maxQueue uint16) {
		req, err := ParseCMRequest(pd)
		if err == nil {
			err = req.Check(maxQID, maxQueue)
		}
		if err != nil {
			var st CMStatus
			if !errors.As(err, &st) || !st.Valid() {
				t.Fatalf("CM request error %v does not carry a valid CMStatus", err)
			}
		}
		if len(pd) >= CMRequestSize && req.RecFmt == 0 {
			out := make([]byte, CMRequestSize)
			CMRequest(out).Encode(&req)
			if got, err := ParseCMRequest(out); err != nil || got != req {
				t.Fatalf("CM request round trip: %+v, %v", got, err)
			}
		}

		if acc, err := ParseCMAccept(pd); err == nil {
			out := make([]byte, CMAcceptSize)
			CMAccept(out).Encode(&acc)
			if got, err := ParseCMAccept(out); err != nil || got != acc {
				t.Fatalf("CM accept round trip: %+v, %v", got, err)
			}
		}

		if rej, err := ParseCMReject(pd); err == nil {
			_ = rej.Status.String() + rej.Status.Error()
			out := make([]byte, CMRejectSize)
			CMReject(out).Encode(&rej)
			if got, err := ParseCMReject(out); err != nil || got != rej {
				t.Fatalf("CM reject round trip: %+v, %v", got, err)
			}
		}
	})
}

func FuzzConnectData(f *testing.F) {
	good := make([]byte, ConnectDataSize)
	ConnectData(good).Encode(&ConnectDataFields{HostID: testHostID, CNTLID: 0xffff, SubNQN: testSubNQN, HostNQN: testHostNQN})
	f.Add(good)
	f.Add(make([]byte, ConnectDataSize))
	f.Add(good[:600])
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := ParseConnectData(b)
		if err != nil {
			var fe *FieldError
			if len(b) >= ConnectDataSize && (!errors.As(err, &fe) ||
				(fe.Offset != ConnectDataSubNQNOffset && fe.Offset != ConnectDataHostNQNOffset)) {
				t.Fatalf("ParseConnectData error %v is not a *FieldError at an NQN", err)
			}
			return
		}
		out := make([]byte, ConnectDataSize)
		if err := ConnectData(out).Encode(&d); err != nil {
			t.Fatalf("Encode(parsed connect data): %v", err)
		}
		got, err := ParseConnectData(out)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(d, got); diff != "" {
			t.Fatalf("connect data round trip (-want +got):\n%s", diff)
		}
	})
}

func FuzzDiscoveryLog(f *testing.F) {
	page := make([]byte, DiscoveryLogSize(2))
	if _, err := EncodeDiscoveryLog(page, 3, labEntries()); err != nil {
		f.Fatal(err)
	}
	f.Add(page)
	f.Add(page[:1024])
	f.Add(page[:2000])
	huge := append([]byte(nil), page[:1024]...)
	huge[15] = 0xff // NUMREC near 2^64
	f.Add(huge)
	f.Fuzz(func(t *testing.T, b []byte) {
		h, entries, err := ParseDiscoveryLog(b)
		if err != nil && !errors.Is(err, errTruncatedDiscLog) {
			if len(b) >= DiscoveryLogHeaderSize {
				t.Fatalf("ParseDiscoveryLog: %v", err)
			}
			return
		}
		if uint64(len(entries)) > h.NumRec || DiscoveryLogSize(len(entries)) > len(b) {
			t.Fatalf("%d entries from %d bytes with NUMREC %d", len(entries), len(b), h.NumRec)
		}
		out := make([]byte, DiscoveryLogSize(len(entries)))
		n, err := EncodeDiscoveryLog(out, h.GenCtr, entries)
		if err != nil {
			return // strings a controller may send but rdisk does not encode
		}
		h2, got, err := ParseDiscoveryLog(out[:n])
		if err != nil || h2.GenCtr != h.GenCtr || h2.NumRec != uint64(len(entries)) {
			t.Fatalf("re-parse: %+v, %v", h2, err)
		}
		if !slices.Equal(entries, got) {
			t.Fatalf("discovery round trip:\n%s", cmp.Diff(entries, got))
		}
	})
}

func FuzzIdentifyController(f *testing.F) {
	c := testIdentifyController()
	b := make([]byte, IdentifySize)
	if err := c.Encode(b); err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add(make([]byte, IdentifySize))
	f.Add(b[:100])
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := ParseIdentifyController(b)
		if err != nil {
			if len(b) >= IdentifySize {
				t.Fatalf("ParseIdentifyController: %v", err)
			}
			return
		}
		if len(c.PSD) != min(int(c.NPSS)+1, 32) {
			t.Fatalf("%d power states for NPSS %d", len(c.PSD), c.NPSS)
		}
		out := make([]byte, IdentifySize)
		if err := c.Encode(out); err != nil {
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("Encode(parsed) error %v is not a *FieldError", err)
			}
			return
		}
		got, err := ParseIdentifyController(out)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(c, got); diff != "" {
			t.Fatalf("identify controller round trip (-want +got):\n%s", diff)
		}
	})
}

func FuzzIdentifyNamespace(f *testing.F) {
	n := IdentifyNamespace{NSZE: 1 << 21, NCAP: 1 << 21, NUSE: 1 << 21, NLBAF: 1, FLBAS: 1,
		LBAF: []LBAFormat{{LBADS: 9}, {LBADS: 12}}, NGUID: [16]byte{1}}
	b := make([]byte, IdentifySize)
	if err := n.Encode(b); err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add(make([]byte, IdentifySize))
	f.Fuzz(func(t *testing.T, b []byte) {
		n, err := ParseIdentifyNamespace(b)
		if err != nil {
			if len(b) >= IdentifySize {
				t.Fatalf("ParseIdentifyNamespace: %v", err)
			}
			return
		}
		if c, err := ParseIdentifyControllerNVM(b); err != nil {
			t.Fatalf("ParseIdentifyControllerNVM: %v", err)
		} else {
			out := make([]byte, IdentifySize)
			if err := c.Encode(out); err != nil {
				t.Fatal(err)
			}
			if got, err := ParseIdentifyControllerNVM(out); err != nil || got != c {
				t.Fatalf("identify controller NVM round trip: %+v != %+v", got, c)
			}
		}
		if bs := n.BlockSize(); bs != 0 && (bs < 512 || bs&(bs-1) != 0) {
			t.Fatalf("BlockSize %d", bs)
		}
		out := make([]byte, IdentifySize)
		if err := n.Encode(out); err != nil {
			t.Fatalf("Encode(parsed): %v", err)
		}
		got, err := ParseIdentifyNamespace(out)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(n, got); diff != "" {
			t.Fatalf("identify namespace round trip (-want +got):\n%s", diff)
		}
	})
}

func FuzzIdentifyLists(f *testing.F) {
	ids := NamespaceIDs{UUID: [16]byte{1}, HasUUID: true, NGUID: [16]byte{2}, HasNGUID: true, HasCSI: true}
	b := make([]byte, IdentifySize)
	if err := ids.Encode(b); err != nil {
		f.Fatal(err)
	}
	f.Add(b[:128])
	f.Add(unhex(f, "01 00 00 00 02 00 00 00 00 01 00 00", 0))
	f.Add(unhex(f, "ff ff ff ff", 0))
	f.Add(unhex(f, "07 00 00 00 07 00 00 00 04 01 00 00 00", 0))
	f.Fuzz(func(t *testing.T, b []byte) {
		if ids, err := ParseNamespaceIDs(b); err == nil {
			out := make([]byte, IdentifySize)
			if err := ids.Encode(out); err != nil {
				t.Fatal(err)
			}
			got, err := ParseNamespaceIDs(out)
			if err != nil || got != ids {
				t.Fatalf("descriptor round trip: %+v != %+v (%v)", got, ids, err)
			}
		} else if !errors.Is(err, errNSDescLength) && !errors.Is(err, errNSDescOverflow) {
			t.Fatalf("ParseNamespaceIDs: %v", err)
		}

		if list, err := ParseNSIDList(b, nil); err == nil {
			out := make([]byte, IdentifySize)
			if err := EncodeNSIDList(out, list); err != nil {
				if !errors.Is(err, errNSIDListUnordered) { // NSIDAll is listable but not encodable
					t.Fatal(err)
				}
			} else if got, err := ParseNSIDList(out, nil); err != nil || !slices.Equal(got, list) {
				t.Fatalf("NSID list round trip: %v != %v (%v)", got, list, err)
			}
		}

		for i := -1; i <= len(b)/DSMRangeSize; i++ {
			r, err := DSMRangeAt(b, i)
			if (err == nil) != (i >= 0 && i < len(b)/DSMRangeSize) {
				t.Fatalf("DSMRangeAt(%d bytes, %d) = %v", len(b), i, err)
			}
			if err == nil {
				f := DSMRangeFields{ContextAttributes: r.ContextAttributes(), Length: r.Length(), SLBA: r.SLBA()}
				out := make(DSMRange, DSMRangeSize)
				out.Encode(&f)
				checkBytes(t, "DSM range round trip", out, r)
			}
		}

		list, overflow := ParseChangedNSList(b, nil)
		if overflow && len(list) != 0 || len(list) > MaxNSIDListEntries {
			t.Fatalf("changed list: %d entries, overflow %v", len(list), overflow)
		}
	})
}

func FuzzLogPages(f *testing.F) {
	smart := make([]byte, SMARTLogSize)
	(&SMARTLog{Temperature: 300, HostReads: 5}).Encode(smart)
	f.Add(smart)
	f.Add(make([]byte, CommandEffectsLogSize))
	f.Add(make([]byte, 64))
	f.Fuzz(func(t *testing.T, b []byte) {
		if l, err := ParseSMARTLog(b); err == nil {
			out := make([]byte, SMARTLogSize)
			if err := l.Encode(out); err != nil {
				t.Fatal(err)
			}
			if got, err := ParseSMARTLog(out); err != nil || got != l {
				t.Fatalf("SMART round trip: %v", err)
			}
		}
		if e, err := ParseErrorLogEntry(b); err == nil {
			out := make([]byte, ErrorLogEntrySize)
			if err := e.Encode(out); err != nil {
				t.Fatal(err)
			}
			if got, err := ParseErrorLogEntry(out); err != nil || got != e {
				t.Fatalf("error log round trip: %v", err)
			}
		}
		if l, err := ParseFirmwareSlotLog(b); err == nil {
			out := make([]byte, FirmwareSlotLogSize)
			if err := l.Encode(out); err == nil {
				if got, err := ParseFirmwareSlotLog(out); err != nil || got != l {
					t.Fatalf("firmware slot round trip: %v", err)
				}
			}
		}
		var l CommandEffectsLog
		if err := ParseCommandEffectsLog(b, &l); err == nil {
			out := make([]byte, CommandEffectsLogSize)
			if err := l.Encode(out); err != nil {
				t.Fatal(err)
			}
			// Bytes 2048-4095 are reserved: Encode zeroes them.
			checkBytes(t, "effects round trip", out[:2048], b[:2048])
		}
		if _, _, err := ParseTimestamp(b); err != nil && len(b) >= TimestampSize {
			t.Fatal(err)
		}
		if r, err := LogPageRange(b, uint64(len(b)/2)&^3, 100); err == nil && len(r) > 100 {
			t.Fatalf("LogPageRange returned %d bytes", len(r))
		}
	})
}
