package nvmeof

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestCAP(t *testing.T) {
	// Linux nvmet_init_cap: CSS NVM (bit 37), TO 15 (bits 31:24), MQES
	// queue size - 1; here 1024 entries.
	f := CAPFields{MQES: 1023, TO: 15, CSS: CAPCSSNVM}
	c := MakeCAP(f)
	if c != 0x200f0003ff {
		t.Errorf("MakeCAP = %#x, want 0x200f0003ff", uint64(c))
	}
	if d := cmp.Diff(f, c.Fields()); d != "" {
		t.Errorf("CAP fields (-want +got):\n%s", d)
	}
	all := CAPFields{MQES: 0xffff, CQR: true, AMS: 3, TO: 0xff, DSTRD: 0xf, NSSRS: true, CSS: 0xff, MPSMIN: 0xf, MPSMAX: 0xf}
	if d := cmp.Diff(all, MakeCAP(all).Fields()); d != "" {
		t.Errorf("CAP all ones (-want +got):\n%s", d)
	}
	if MakeCAP(all) != 0x00ff1fffff07ffff {
		t.Errorf("CAP all ones = %#x", uint64(MakeCAP(all)))
	}
}

func TestCC(t *testing.T) {
	// What the Linux host writes (nvme_enable_ctrl): CSS NVM, MPS 0 (4
	// KiB), AMS RR, IOSQES 6, IOCQES 4, EN.
	f := CCFields{EN: true, IOSQES: 6, IOCQES: 4}
	c := MakeCC(f)
	if c != 0x00460001 {
		t.Errorf("MakeCC = %#x, want 0x00460001", uint32(c))
	}
	if d := cmp.Diff(f, c.Fields()); d != "" {
		t.Errorf("CC fields (-want +got):\n%s", d)
	}
	shn := MakeCC(CCFields{EN: true, SHN: CCShutdownNormal, IOSQES: 6, IOCQES: 4})
	if shn != 0x00464001 || shn.SHN() != CCShutdownNormal {
		t.Errorf("CC with SHN normal = %#x", uint32(shn))
	}
	all := CCFields{EN: true, CSS: 7, MPS: 0xf, AMS: 7, SHN: 3, IOSQES: 0xf, IOCQES: 0xf, CRIME: true}
	if d := cmp.Diff(all, MakeCC(all).Fields()); d != "" {
		t.Errorf("CC all ones (-want +got):\n%s", d)
	}
}

func TestCSTSAndVersion(t *testing.T) {
	s := CSTSReady.WithSHST(ShutdownStatusComplete)
	if s != 0x9 || !s.RDY() || s.CFS() || s.SHST() != ShutdownStatusComplete {
		t.Errorf("CSTS = %#x", uint32(s))
	}
	if s.WithSHST(ShutdownStatusNormal) != CSTSReady {
		t.Errorf("WithSHST(normal) = %#x", uint32(s.WithSHST(0)))
	}
	v := MakeVersion(1, 4, 0)
	if v != 0x00010400 || v.String() != "1.4.0" || v.Major() != 1 || v.Minor() != 4 || v.Tertiary() != 0 {
		t.Errorf("Version = %#x %s", uint32(v), v)
	}
}
