package host

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/rdisk/rdisk/blockdev"
	"github.com/rdisk/rdisk/scsi"
)

// Golden ALUA pages: rdisk's (and LIO's) VPD page 83h through relative
// target port 2 of group 20, and REPORT TARGET PORT GROUPS with two groups
// in both formats.
const (
	vpd83 = "00 83 00 44" +
		" 01 03 00 08 60014051234567 89" + // NAA 6
		" 02 01 00 0c 524449534b202020 53455231" + // T10 "RDISK   SER1"
		" 51 94 00 04 00000002" + // relative target port 2
		" 51 95 00 04 00000014" + // target port group 20
		" 53 a8 00 14 69716e2e323032362d31312e696f3a7400000000" // SCSI name (device)
	rtpgLen = "0000001c" +
		" 00 cf 000a 00 00 00 01 00000001" +
		" 82 cf 0014 00 02 00 02 00000002 00000003"
	rtpgExt = "00000020 10 1e 0000" +
		" 00 cf 000a 00 00 00 01 00000001" +
		" 82 cf 0014 00 02 00 02 00000002 00000003"
)

func TestParseDeviceID(t *testing.T) {
	d, err := ParseDeviceID(unhex(t, vpd83))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(d.NAA, unhex(t, "6001405123456789")) || string(d.T10) != "RDISK   SER1" ||
		!d.HasRelativePort || d.RelativeTargetPort != 2 || !d.HasPortGroup || d.PortGroup != 20 {
		t.Errorf("%+v", d)
	}
	if got := d.DiskID(); got != "naa.6001405123456789" {
		t.Errorf("DiskID %q", got)
	}
	if got := (DeviceID{EUI64: []byte{1, 2, 3, 4, 5, 6, 7, 8}}).DiskID(); got != "eui.0102030405060708" {
		t.Errorf("EUI-64 DiskID %q", got)
	}
	if got := (DeviceID{T10: []byte("RDISK   S1  ")}).DiskID(); got != "t10.RDISK   S1" {
		t.Errorf("T10 DiskID %q", got)
	}
	if got := (DeviceID{}).DiskID(); got != "" {
		t.Errorf("empty DiskID %q", got)
	}
	if _, err := ParseDeviceID(unhex(t, "00 80 00 00")); !errors.Is(err, ErrPageCode) {
		t.Errorf("page 80h: %v", err)
	}
	if _, err := ParseDeviceID([]byte{0, 0x83}); !errors.Is(err, ErrShortData) {
		t.Errorf("2 bytes: %v", err)
	}
	// A truncated designator is ignored, the ones before it kept.
	d, err = ParseDeviceID(unhex(t, "00 83 00 10 51 94 00 04 00000007 51 95 00 08 0000"))
	if err != nil || d.RelativeTargetPort != 7 || d.HasPortGroup {
		t.Errorf("truncated: %+v %v", d, err)
	}
}

func TestParseTargetPortGroups(t *testing.T) {
	want := []PortGroup{
		{ID: 10, State: scsi.ALUAActiveOptimized, Supported: 0xcf, Ports: []uint16{1}},
		{ID: 20, State: scsi.ALUAStandby, Preferred: true, Supported: 0xcf, Status: 2, Ports: []uint16{2, 3}},
	}
	for _, c := range []struct {
		name string
		data string
		ext  bool
		secs uint8
	}{{"length", rtpgLen, false, 0}, {"extended", rtpgExt, true, 30}} {
		tpg, err := ParseTargetPortGroups(unhex(t, c.data))
		if err != nil {
			t.Fatal(err)
		}
		if tpg.Extended != c.ext || tpg.ImplicitTransitionSecs != c.secs || tpg.Length != uint64(len(unhex(t, c.data))) || len(tpg.Groups) != 2 {
			t.Fatalf("%s: %+v", c.name, tpg)
		}
		for i, g := range tpg.Groups {
			w := want[i]
			if g.ID != w.ID || g.State != w.State || g.Preferred != w.Preferred || g.Supported != w.Supported || g.Status != w.Status ||
				len(g.Ports) != len(w.Ports) || g.Ports[0] != w.Ports[0] || g.Ports[len(g.Ports)-1] != w.Ports[len(w.Ports)-1] {
				t.Errorf("%s: group %d %+v, want %+v", c.name, i, g, w)
			}
		}
	}
	// Cut by the allocation length: the whole length is kept, the cut
	// descriptor left out.
	b := unhex(t, rtpgLen)[:20]
	tpg, err := ParseTargetPortGroups(b)
	if err != nil || tpg.Length != 32 || len(tpg.Groups) != 1 {
		t.Errorf("truncated: %+v %v", tpg, err)
	}
	// LIO's extended header counts only the descriptors.
	lio := unhex(t, "00000018 10 00 0000 00 cf 000a 00 00 00 01 00000001 00 cf 000b 00 00 00 01 00000002")
	if tpg, err := ParseTargetPortGroups(lio); err != nil || len(tpg.Groups) != 2 || tpg.Groups[1].ID != 11 {
		t.Errorf("LIO's extended header: %+v %v", tpg, err)
	}
	if _, err := ParseTargetPortGroups([]byte{0, 0}); !errors.Is(err, ErrShortData) {
		t.Errorf("2 bytes: %v", err)
	}
}

func TestSenseAccessState(t *testing.T) {
	sense := func(k scsi.SenseKey, asc scsi.ASC) []byte {
		b := make([]byte, scsi.SenseFixedLen)
		scsi.EncodeFixedSense(b, k, asc, -1)
		return b
	}
	for _, c := range []struct {
		st    scsi.Status
		sense []byte
		want  blockdev.AccessState
		ok    bool
	}{
		{scsi.StatusCheckCondition, sense(scsi.KeyNotReady, scsi.ASCALUATransition), blockdev.AccessTransitioning, true},
		{scsi.StatusCheckCondition, sense(scsi.KeyNotReady, scsi.ASCALUAStandby), blockdev.AccessInaccessible, true},
		{scsi.StatusCheckCondition, sense(scsi.KeyNotReady, scsi.ASCALUAUnavailable), blockdev.AccessInaccessible, true},
		{scsi.StatusCheckCondition, sense(scsi.KeyNotReady, scsi.ASCALUAOffline), blockdev.AccessPersistentLoss, true},
		{scsi.StatusCheckCondition, sense(scsi.KeyNotReady, scsi.ASCLUNotReady), 0, false},
		{scsi.StatusCheckCondition, sense(scsi.KeyUnitAttention, scsi.ASCALUAStandby), 0, false},
		{scsi.StatusBusy, nil, 0, false},
	} {
		got, ok := SenseAccessState(c.st, c.sense)
		if got != c.want || ok != c.ok {
			t.Errorf("%v % x: %v %v, want %v %v", c.st, c.sense, got, ok, c.want, c.ok)
		}
		err := NewStatusError("", "READ(16)", c.st, c.sense)
		if errors.Is(err, blockdev.ErrPath) != c.ok || !errors.Is(err, blockdev.ErrIO) {
			t.Errorf("%v % x: ErrPath %v, ErrIO %v", c.st, c.sense, errors.Is(err, blockdev.ErrPath), errors.Is(err, blockdev.ErrIO))
		}
	}
	n := testing.AllocsPerRun(100, func() {
		SenseAccessState(scsi.StatusCheckCondition, sense(scsi.KeyNotReady, scsi.ASCALUAStandby)[:18:18])
	})
	if n > 1 { // the sense helper's buffer
		t.Errorf("%v allocations", n)
	}
	if ua := ParseUnitAttention(scsi.StatusCheckCondition, sense(scsi.KeyUnitAttention, scsi.ASCAsymmetricAccessChanged)); ua != ALUAChanged {
		t.Errorf("2Ah/06h: %v", ua)
	}
	if ua := ParseUnitAttention(scsi.StatusCheckCondition, sense(scsi.KeyUnitAttention, scsi.ASCImplicitTransitionFailed)); ua != ALUAChanged {
		t.Errorf("2Ah/07h: %v", ua)
	}
}

func TestPathRefresh(t *testing.T) {
	ctx := context.Background()
	pages := rdiskPages(t, mode6RW)
	pages["120183"] = unhex(t, vpd83)
	pages["a32a00"] = unhex(t, rtpgExt)
	f := &fakeLU{pages: pages}
	p, err := NewPath(ctx, f, 0, InquiryData{TPGS: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if p.AccessState() != blockdev.AccessInaccessible || p.DiskID() != "naa.6001405123456789" {
		t.Errorf("state %v, id %q", p.AccessState(), p.DiskID())
	}
	if st, ok := p.ALUAState(); !ok || st != scsi.ALUAStandby {
		t.Errorf("ALUA state %v %v", st, ok)
	}
	want := []string{"120183020000", "a32a00000000000010000000"}
	if len(f.cdbs) != 2 || f.cdbs[0] != want[0] || f.cdbs[1] != want[1] {
		t.Errorf("CDBs %v, want %v", f.cdbs, want)
	}
	// Group 20 becomes active/optimized.
	pages["a32a00"] = unhex(t, "00000020 10 1e 0000 00 cf 000a 00 00 00 01 00000001 80 cf 0014 00 02 00 02 00000002 00000003")
	if st, err := p.Refresh(ctx); err != nil || st != blockdev.AccessOptimized {
		t.Errorf("Refresh: %v %v", st, err)
	}
	// A target without the extended header: the length format is asked.
	delete(pages, "a32a00")
	pages["a30a00"] = unhex(t, rtpgLen)
	if st, err := p.Refresh(ctx); err != nil || st != blockdev.AccessInaccessible {
		t.Errorf("Refresh without the extended header: %v %v", st, err)
	}
	// LIO's extended format: RETURN DATA LENGTH counts the descriptors
	// only, and only that + 4 bytes are transferred, cutting off the last
	// port (seen over ib_srpt): the length format is asked, which LIO
	// transfers whole.
	f.cdbs = nil
	lioExt := unhex(t, "0000000c 10 00 0000 80 cf 0014 00 00 00 01 00000002")
	pages["a32a00"] = lioExt[:len(lioExt)-4]
	pages["a30a00"] = unhex(t, "0000000c 80 cf 0014 00 00 00 01 00000002")
	if st, err := p.Refresh(ctx); err != nil || st != blockdev.AccessOptimized || len(f.cdbs) != 3 {
		t.Errorf("Refresh against LIO's short extended RTPG: %v %v, CDBs %v", st, err, f.cdbs)
	}
	delete(pages, "a32a00")
	pages["a30a00"] = unhex(t, rtpgLen)
	// Offline: the target refuses even INQUIRY with 04h/12h.
	f.fail = map[byte]scsi.SenseKey{}
	off := &offlineLU{}
	p2, err := NewPath(ctx, off, 0, InquiryData{TPGS: 1}, nil)
	if err != nil || p2.AccessState() != blockdev.AccessPersistentLoss {
		t.Errorf("offline path: %v %v", p2, err)
	}
	// Without TPGS only the identity is read.
	f = &fakeLU{pages: pages}
	p3, err := NewPath(ctx, f, 0, InquiryData{}, nil)
	if err != nil || p3.AccessState() != blockdev.AccessUnknown || len(f.cdbs) != 1 || p3.DiskID() == "" {
		t.Errorf("no ALUA: %v %v %v", p3.AccessState(), err, f.cdbs)
	}
	// Failed records a refusal's state at once.
	b := make([]byte, scsi.SenseFixedLen)
	scsi.EncodeFixedSense(b, scsi.KeyNotReady, scsi.ASCALUATransition, -1)
	p3.Close()
	if st, ok := p3.Failed(scsi.StatusCheckCondition, b); !ok || st != blockdev.AccessTransitioning || p3.AccessState() != blockdev.AccessTransitioning {
		t.Errorf("Failed: %v %v, state %v", st, ok, p3.AccessState())
	}
	if _, ok := p3.Failed(scsi.StatusBusy, nil); ok {
		t.Error("BUSY taken for a path refusal")
	}
}

// offlineLU refuses everything with NOT READY 04h/12h, as LIO's offline
// target port.
type offlineLU struct{}

func (offlineLU) RunSCSI(ctx context.Context, c *Command) error {
	c.Status = scsi.StatusCheckCondition
	c.Sense = make([]byte, scsi.SenseFixedLen)
	scsi.EncodeFixedSense(c.Sense, scsi.KeyNotReady, scsi.ASCALUAOffline, -1)
	return nil
}

func TestProbeStandby(t *testing.T) {
	// TEST UNIT READY is refused in standby; the rest of the probe works.
	f := &fakeLU{pages: rdiskPages(t, mode6RW), fail: map[byte]scsi.SenseKey{}}
	sb := &standbyTUR{fakeLU: f}
	if _, err := Probe(context.Background(), sb, 0, 1<<20); err != nil {
		t.Errorf("standby: %v", err)
	}
	un := &standbyTUR{fakeLU: f}
	un.asc = scsi.ASCALUAUnavailable
	if _, err := Probe(context.Background(), un, 0, 1<<20); !errors.Is(err, blockdev.ErrPath) {
		t.Errorf("unavailable: %v, want ErrPath", err)
	}
}

type standbyTUR struct {
	*fakeLU
	asc scsi.ASC
}

func (s *standbyTUR) RunSCSI(ctx context.Context, c *Command) error {
	if c.CDB[0] == scsi.OpTestUnitReady {
		c.Status = scsi.StatusCheckCondition
		c.Sense = make([]byte, scsi.SenseFixedLen)
		asc := scsi.ASCALUAStandby
		if s.asc != 0 {
			asc = s.asc
		}
		scsi.EncodeFixedSense(c.Sense, scsi.KeyNotReady, asc, -1)
		return nil
	}
	return s.fakeLU.RunSCSI(ctx, c)
}

func FuzzALUA(f *testing.F) {
	for _, s := range []string{vpd83, rtpgLen, rtpgExt, "00 83 00 08 51 94 00 ff 0000", "ffffffff 10 00 0000 00 cf 0001 00 00 00 ff"} {
		f.Add(unhex(f, s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if d, err := ParseDeviceID(b); err == nil {
			d.DiskID()
			if len(d.NAA)+len(d.EUI64)+len(d.T10)+len(d.Name) > len(b) {
				t.Fatalf("designators longer than the page: %+v", d)
			}
		}
		if tpg, err := ParseTargetPortGroups(b); err == nil {
			n := 0
			for _, g := range tpg.Groups {
				n += 8 + 4*len(g.Ports)
			}
			if n > len(b) {
				t.Fatalf("%d descriptor bytes from %d", n, len(b))
			}
		}
		SenseAccessState(scsi.StatusCheckCondition, b)
	})
}
