package target

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"github.com/rdisk/rdisk/srp"
	"github.com/rdisk/rdisk/srp/initiator"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rdisk/rdisk/backstore"
	"github.com/rdisk/rdisk/blockdev"
	"github.com/rdisk/rdisk/scsi"
)

// expectTLogout reads IUs until an SRP_T_LOGOUT and checks its reason.
func expectTLogout(t *testing.T, c *rawConn, want srp.TLogoutReason) {
	t.Helper()
	for {
		iu := c.recv(10 * time.Second)
		if iu == nil {
			t.Fatalf("connection ended without SRP_T_LOGOUT (want %s)", want)
		}
		if srp.Opcode(iu[0]) != srp.OpTLogout {
			continue
		}
		f, err := srp.ParseTLogout(iu)
		if err != nil {
			t.Fatal(err)
		}
		if f.Reason != want {
			t.Fatalf("T_LOGOUT reason %d (%s), want %d (%s)", f.Reason, f.Reason, want, want)
		}
		if c.recv(5*time.Second) != nil {
			t.Errorf("IU after T_LOGOUT")
		}
		return
	}
}

func TestProtocolErrorsLogOut(t *testing.T) {
	t.Parallel()
	lt := startTarget(t, Config{}, PortConfig{}, newTestDisk(t, 1<<20))
	cmd := func(mutate func(f *srp.CmdFields, b []byte)) []byte {
		b := make([]byte, 128)
		f := srp.CmdFields{Tag: 5}
		copy(f.CDB[:], read10(0, 1))
		mutate(&f, b)
		srp.Cmd(b).Encode(&f)
		return b
	}
	cases := []struct {
		name string
		iu   []byte
		want srp.TLogoutReason
	}{
		{"invalid IU type", []byte{byte(srp.OpLoginRsp), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, srp.TLogoutInvalidIUType},
		{"target-to-initiator opcode", make([]byte, 36), srp.TLogoutInvalidIUType},
		{"unexpected CRED_RSP", []byte{byte(srp.OpCredRsp), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7}, srp.TLogoutUnexpectedRsp},
		{"data-out format 5", cmd(func(f *srp.CmdFields, b []byte) { f.DataOutFmt = 5 }), srp.TLogoutUnsupportedOutFmt},
		{"data-in immediate", cmd(func(f *srp.CmdFields, b []byte) { f.DataInFmt = srp.DescImmediate }), srp.TLogoutUnsupportedInFmt},
		{"immediate not negotiated", cmd(func(f *srp.CmdFields, b []byte) { f.DataOutFmt = srp.DescImmediate }), srp.TLogoutUnsupportedOutFmt},
		{"indirect count above the table", cmd(func(f *srp.CmdFields, b []byte) {
			f.DataInFmt, f.DataInCount = srp.DescIndirect, 3
			srp.PutIndirectHdr(b[srp.CmdSize:], srp.DirectDesc{Len: 2 * srp.DirectDescSize}, 512)
		}), srp.TLogoutInvalidInCount},
		{"data-out count on a read", cmd(func(f *srp.CmdFields, b []byte) {
			f.DataInFmt, f.DataInCount, f.DataOutCount = srp.DescIndirect, 1, 1
			srp.PutIndirectHdr(b[srp.CmdSize:], srp.DirectDesc{Len: srp.DirectDescSize}, 512)
		}), srp.TLogoutInvalidOutCount},
		{"truncated SRP_CMD", []byte{byte(srp.OpCmd), 0, 0, 0}, srp.TLogoutInvalidIUType},
	}
	cases[1].iu[0] = byte(srp.OpRsp)
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := rawLogin(t, lt.addr, loginPD(rawLoginFields(srp.MakePortID(0xe, uint64(i)))))
			if err != nil {
				t.Fatal(err)
			}
			c.send(tc.iu)
			expectTLogout(t, c, tc.want)
		})
	}
}

// TestCommandRejects: problems the target answers with CHECK CONDITION
// (INVALID FIELD IN COMMAND INFORMATION UNIT) rather than a logout.
func TestCommandRejects(t *testing.T) {
	t.Parallel()
	lt := startTarget(t, Config{MaxDescriptors: 2, NoExternalTables: true}, PortConfig{}, newTestDisk(t, 1<<20))
	for _, tc := range []struct {
		name string
		cfg  initiator.Config
	}{
		{"table larger than MaxDescriptors", initiator.Config{Policy: initiator.PolicyIndirect, IndirectPieces: 3}},
		{"external table refused", initiator.Config{Policy: initiator.PolicyExternal, IndirectPieces: 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := login(t, lt, tc.cfg)
			clearUA(t, s)
			c := &initiator.Command{CDB: read10(0, 8), Dir: scsi.DirIn, Data: make([]byte, 4096)}
			var se *initiator.SCSIError
			err := s.Exec(testCtx(t), 0, c)
			if !errors.As(err, &se) || se.Parsed.Key != scsi.KeyIllegalRequest || se.Parsed.ASC != scsi.ASCInvalidFieldInCommandIU {
				t.Fatalf("READ: %v, want ILLEGAL REQUEST, INVALID FIELD IN COMMAND IU", err)
			}
			if s.Err() != nil {
				t.Fatalf("channel failed: %v", s.Err())
			}
		})
	}
	// A transfer above MaxTransfer is refused the same way.
	s := login(t, lt, initiator.Config{MaxTransfer: 4 << 20})
	clearUA(t, s)
	c := &initiator.Command{CDB: read10(0, 4096), Dir: scsi.DirIn, Data: make([]byte, 2<<20)}
	var se *initiator.SCSIError
	if err := s.Exec(testCtx(t), 0, c); !errors.As(err, &se) || se.Parsed.ASC != scsi.ASCInvalidFieldInCommandIU {
		t.Fatalf("2 MiB READ: %v, want INVALID FIELD IN COMMAND IU", err)
	}
}

func TestResiduals(t *testing.T) {
	t.Parallel()
	disk := newTestDisk(t, 1<<20)
	lt := startTarget(t, Config{}, PortConfig{}, disk)
	for _, pol := range []initiator.DescriptorPolicy{initiator.PolicyDirect, initiator.PolicyIndirect} {
		s := login(t, lt, initiator.Config{Policy: pol, InitiatorPortID: srp.MakePortID(0x77, uint64(pol))})
		clearUA(t, s)
		want := randBytes(8192, 3)
		if err := s.Exec(testCtx(t), 0, &initiator.Command{CDB: write10(0, 16), Dir: scsi.DirOut, Data: want}); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			name   string
			cdb    []byte
			dir    scsi.Dir
			n      int
			flag   uint8
			resid  uint32
			status scsi.Status
		}{
			{"read underflow", read10(0, 8), scsi.DirIn, 8192, srp.RspFlagDIUnder, 4096, scsi.StatusGood},
			{"read overflow", read10(0, 8), scsi.DirIn, 2048, srp.RspFlagDIOver, 2048, scsi.StatusGood},
			{"write overflow", write10(0, 8), scsi.DirOut, 2048, srp.RspFlagDOOver, 2048, scsi.StatusGood},
			{"write underflow", write10(0, 4), scsi.DirOut, 4096, srp.RspFlagDOUnder, 2048, scsi.StatusGood},
			{"exact", read10(0, 8), scsi.DirIn, 4096, 0, 0, scsi.StatusGood},
		} {
			data := make([]byte, tc.n)
			if tc.dir == scsi.DirOut {
				copy(data, want)
			}
			c := &initiator.Command{CDB: tc.cdb, Dir: tc.dir, Data: data}
			if err := s.Exec(testCtx(t), 0, c); err != nil {
				t.Fatalf("%s %s: %v", pol, tc.name, err)
			}
			if c.Flags&(srp.RspFlagDIUnder|srp.RspFlagDIOver|srp.RspFlagDOUnder|srp.RspFlagDOOver) != tc.flag || c.Residual != tc.resid {
				t.Errorf("%s %s: flags %#x residual %d, want %#x %d", pol, tc.name, c.Flags, c.Residual, tc.flag, tc.resid)
			}
			if tc.dir == scsi.DirIn {
				n := min(tc.n, 4096)
				if !bytes.Equal(data[:n], want[:n]) {
					t.Errorf("%s %s: data differs", pol, tc.name)
				}
			}
		}
	}
}

// TestFormats writes and verifies data through every descriptor format and
// checks on the target's counters that each format was used.
func TestFormats(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		pol    initiator.DescriptorPolicy
		pieces int
		stat   func(Stats) uint64
		want   uint64
	}{
		{initiator.PolicyAuto, 0, func(s Stats) uint64 { return s.Immediate }, 3}, // the writes of up to 8 KiB
		{initiator.PolicyDirect, 0, func(s Stats) uint64 { return s.Direct }, 10},
		{initiator.PolicyIndirect, 5, func(s Stats) uint64 { return s.Indirect }, 10},
		{initiator.PolicyExternal, 7, func(s Stats) uint64 { return s.External }, 9}, // a 512-byte transfer has room for 1 descriptor only

	} {
		t.Run(tc.pol.String(), func(t *testing.T) {
			t.Parallel()
			lt := startTarget(t, Config{}, PortConfig{}, newTestDisk(t, 4<<20))
			d := openDev(t, lt, initiator.Config{Policy: tc.pol, IndirectPieces: tc.pieces, Channels: 2})
			before := tc.stat(lt.t.Stats())
			sizes := []int{512, 4096, 8192, 64 << 10, 512 << 10}
			off := int64(0)
			for i, n := range sizes {
				want := randBytes(n, uint64(i+10))
				if err := ioAt(t, d, blockdev.OpWrite, want, off, i); err != nil {
					t.Fatalf("write %d: %v", n, err)
				}
				got := make([]byte, n)
				if err := ioAt(t, d, blockdev.OpRead, got, off, i+1); err != nil {
					t.Fatalf("read %d: %v", n, err)
				}
				if !bytes.Equal(got, want) {
					t.Fatalf("%d bytes at %d: read back differs", n, off)
				}
				off += int64(n)
			}
			if got := tc.stat(lt.t.Stats()) - before; got < tc.want {
				t.Errorf("%d commands in the %s format, want at least %d (stats %+v)", got, tc.pol, tc.want, lt.t.Stats())
			}
		})
	}
}

// alignDisk records whether every write reached it in a 4 KiB-aligned
// buffer.
type alignDisk struct {
	*testDisk
	writes, misaligned atomic.Int32
}

func (d *alignDisk) WriteAt(p []byte, off int64, f backstore.WriteFlags) error {
	d.writes.Add(1)
	if uintptrOf(&p[0])%4096 != 0 {
		d.misaligned.Add(1)
	}
	return d.testDisk.WriteAt(p, off, f)
}

// TestImmediateDataAlignment: immediate data lands 4 KiB-aligned in the
// receive buffers, so O_DIRECT backstores write it in place: writes with
// immediate data through every receive buffer reach the disk aligned.
func TestImmediateDataAlignment(t *testing.T) {
	t.Parallel()
	disk := &alignDisk{testDisk: newTestDisk(t, 1<<20)}
	lt := startTarget(t, Config{QueueDepth: 4}, PortConfig{}, disk)
	f := rawLoginFields(srp.MakePortID(1, 1))
	f.ReqITIULen, f.ReqFlags, f.ImmDataOffset = 8260, srp.ImmedRequested, 68
	c, err := rawLogin(t, lt.addr, loginPD(f))
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	write := func(tag uint64) []byte {
		b := make([]byte, 68+512)
		cf := srp.CmdFields{Tag: tag, DataOutFmt: srp.DescImmediate}
		copy(cf.CDB[:], []byte{scsi.OpWrite10, 0, 0, 0, 0, byte(tag), 0, 0, 1, 0})
		srp.Cmd(b).Encode(&cf)
		binary.BigEndian.PutUint32(b[srp.CmdSize:], 512) // immediate data descriptor: length
		return b
	}
	const n = 10 // more than the 5 receive buffers: every one is used
	for tag := uint64(1); tag <= n; tag++ {
		c.send(write(tag))
		for {
			iu := c.recv(10 * time.Second)
			if iu == nil {
				t.Fatalf("no response for tag %d", tag)
			}
			if srp.Opcode(iu[0]) == srp.OpRsp {
				if r, _ := srp.ParseRsp(iu); r.Fields().Tag != tag {
					t.Fatalf("response tag %d, want %d", r.Fields().Tag, tag)
				}
				break
			}
		}
	}
	// The first write reports the power-on unit attention.
	if w, m := disk.writes.Load(), disk.misaligned.Load(); w < n-1 || m != 0 {
		t.Fatalf("%d writes reached the disk, %d of them misaligned", w, m)
	}
}

func TestAER(t *testing.T) {
	t.Parallel()
	disk := newTestDisk(t, 1<<20)
	lt := startTarget(t, Config{}, PortConfig{}, disk)
	events := make(chan scsi.ASC, 4)
	s := login(t, lt, initiator.Config{OnAER: func(lun uint64, sense []byte) {
		if sn, err := scsi.ParseSense(sense); err == nil && sn.Key == scsi.KeyUnitAttention {
			events <- sn.ASC
		}
	}})
	clearUA(t, s)
	expect := func(want scsi.ASC) {
		t.Helper()
		select {
		case got := <-events:
			if got != want {
				t.Errorf("AER %s, want %s", got, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no AER (want %s)", want)
		}
	}
	lu, err := scsi.NewLU(newTestDisk(t, 1<<20), scsi.LUConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if err := lt.port.Map(5, lu); err != nil {
		t.Fatal(err)
	}
	expect(scsi.ASCReportedLUNsDataChanged)
	if err := lt.port.CapacityChanged(0); err != nil {
		t.Fatal(err)
	}
	expect(scsi.ASCCapacityDataChanged)
	luns, err := s.ReportLUNs(testCtx(t))
	if err != nil || len(luns) != 2 {
		t.Errorf("REPORT LUNS: %v, %v; want [0 5]", luns, err)
	}
	if aer, _ := s.Events(); aer != 2 {
		t.Errorf("%d AERs counted, want 2", aer)
	}
	waitCredits(t, s, 0, DefaultQueueDepth)
}

func TestInitiatorLogoutWithCommandsInFlight(t *testing.T) {
	t.Parallel()
	disk := newTestDisk(t, 1<<20)
	lt := startTarget(t, Config{}, PortConfig{}, disk)
	s := login(t, lt, initiator.Config{})
	clearUA(t, s)
	disk.hold()
	_, res := startReads(t, s, 0, 4)
	disk.waitBlocked(t, 4)
	done := make(chan struct{})
	go func() {
		s.Close()
		close(done)
	}()
	for _, r := range collect(t, res, 4) {
		if !errors.Is(r.err, blockdev.ErrClosed) {
			t.Errorf("command in flight at logout: %v, want ErrClosed", r.err)
		}
	}
	<-done
	// The target ends the channel; closing the nexus's session aborts
	// the commands, which return once the disk lets them go.
	time.Sleep(50 * time.Millisecond)
	disk.open()
	deadline := time.Now().Add(10 * time.Second)
	for lt.port.Channels() != 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n := lt.port.Channels(); n != 0 {
		t.Errorf("%d channels after the logout", n)
	}
	if st := lt.t.Stats(); st.ILogouts != 1 {
		t.Errorf("target counted %d SRP_I_LOGOUT, want 1", st.ILogouts)
	}
	if err := s.Exec(testCtx(t), 0, &initiator.Command{CDB: make([]byte, 6)}); !errors.Is(err, blockdev.ErrClosed) {
		t.Errorf("Exec after Close: %v", err)
	}
}

func TestTargetLogoutWithCommandsInFlight(t *testing.T) {
	t.Parallel()
	disk := newTestDisk(t, 1<<20)
	lt := startTarget(t, Config{}, PortConfig{}, disk)
	d := openDev(t, lt, initiator.Config{Channels: 2})
	s := d.Session()
	disk.hold()
	_, res := startReads(t, s, 1, 3)
	disk.waitBlocked(t, 3)
	if err := lt.t.RemovePort(testTargetID); err != nil {
		t.Fatal(err)
	}
	for _, r := range collect(t, res, 3) {
		var le *initiator.LogoutError
		if !errors.As(r.err, &le) || le.Reason != srp.TLogoutNoReason || !errors.Is(r.err, blockdev.ErrClosed) {
			t.Errorf("command in flight at the target logout: %v, want a *LogoutError matching ErrClosed", r.err)
		}
	}
	disk.open()
	if st := lt.t.Stats(); st.TLogouts != 2 {
		t.Errorf("%d SRP_T_LOGOUT sent, want 2", st.TLogouts)
	}
	buf, _ := d.AllocBuffer(512)
	r := &blockdev.Request{Op: blockdev.OpRead, Length: 512, Buf: buf}
	if err := blockdev.Do(d, r); !errors.Is(err, blockdev.ErrClosed) {
		t.Errorf("I/O after the target logout: %v, want ErrClosed", err)
	}
	// The port is gone: a new login is rejected.
	if _, err := initiator.Login(context.Background(), newProvider(t), lt.addr, testTargetID, initiator.Config{}); !errors.Is(err, srp.RejUnableAssociateChannel) {
		t.Errorf("login to the removed port: %v", err)
	}
}

// TestReadDepth: the target keeps as many RDMA Reads in flight as the
// initiator's IRD allows (ORD == IRD), here 2 with 8 descriptors per write
// and several writes at once on each channel.
func TestReadDepth(t *testing.T) {
	t.Parallel()
	lt := startTarget(t, Config{}, PortConfig{}, newTestDisk(t, 4<<20))
	d := openDev(t, lt, initiator.Config{Policy: initiator.PolicyIndirect, IndirectPieces: 8, RDMAReadDepth: 2, Channels: 2, QueueDepth: 16})
	const n, size = 32, 64 << 10
	buf, err := d.AllocBuffer(n * size)
	if err != nil {
		t.Fatal(err)
	}
	defer buf.Release()
	want := randBytes(n*size, 21)
	copy(buf.Bytes(), want)
	done := make(chan *blockdev.Request, n)
	reqs := make([]blockdev.Request, n)
	for i := range reqs {
		reqs[i] = blockdev.Request{Op: blockdev.OpWrite, Offset: int64(i * size), Length: size, Buf: buf, BufOff: i * size, Queue: i, C: done}
		if err := d.Submit(&reqs[i]); err != nil {
			t.Fatal(err)
		}
	}
	for range n {
		if r := <-done; r.Err != nil {
			t.Fatalf("write: %v", r.Err)
		}
	}
	got := make([]byte, n*size)
	for off := 0; off < len(got); off += 512 << 10 {
		if err := ioAt(t, d, blockdev.OpRead, got[off:off+512<<10], int64(off), off); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("read back differs")
	}
}

// TestTargetClose: closing the target logs every channel out.
func TestTargetClose(t *testing.T) {
	t.Parallel()
	lt := startTarget(t, Config{}, PortConfig{}, newTestDisk(t, 1<<20))
	s := login(t, lt, initiator.Config{Channels: 2})
	// On iWARP the target may send only after the initiator has: talk on
	// both channels first.
	clearUA(t, s)
	if err := s.Exec(testCtx(t), 1, &initiator.Command{CDB: make([]byte, 6)}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := lt.t.Close(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Close took %v", d)
	}
	deadline := time.Now().Add(5 * time.Second)
	for s.Err() == nil && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	var le *initiator.LogoutError
	if !errors.As(s.Err(), &le) {
		t.Errorf("session error after the target closed: %v, want a *LogoutError", s.Err())
	}
}
