package initiator

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/rdisk/rdisk/blockdev"
	"github.com/rdisk/rdisk/iser"
	"github.com/rdisk/rdisk/rdma"
	"github.com/rdisk/rdisk/scsi"
)

// StatusError is a command the target completed with a SCSI status other
// than GOOD. It matches the blockdev sentinel of its sense key and code
// with errors.Is.
type StatusError struct {
	Command string
	Status  scsi.Status
	// Sense is the decoded sense data (zero when there was none or it did
	// not parse).
	Sense    scsi.Sense
	HasSense bool
}

func (e *StatusError) Error() string {
	if e.HasSense {
		return fmt.Sprintf("iscsi %s: %s, sense key %s, ASC/ASCQ %s", e.Command, e.Status, e.Sense.Key, e.Sense.ASC)
	}
	return fmt.Sprintf("iscsi %s: %s", e.Command, e.Status)
}

// Is maps the status to the blockdev sentinels.
func (e *StatusError) Is(target error) bool {
	switch target {
	case blockdev.ErrRange:
		return e.HasSense && e.Sense.ASC == scsi.ASCLBAOutOfRange
	case blockdev.ErrReadOnly:
		return e.HasSense && e.Sense.Key == scsi.KeyDataProtect
	case blockdev.ErrUnsupported:
		return e.HasSense && e.Sense.ASC == scsi.ASCInvalidCommandOpcode
	case blockdev.ErrInvalid:
		return e.HasSense && e.Sense.Key == scsi.KeyIllegalRequest && e.Sense.ASC != scsi.ASCLBAOutOfRange &&
			e.Sense.ASC != scsi.ASCInvalidCommandOpcode
	case blockdev.ErrIO:
		return !e.HasSense || e.Sense.Key == scsi.KeyMediumError || e.Sense.Key == scsi.KeyHardwareError ||
			e.Sense.Key == scsi.KeyMiscompare || e.Sense.Key == scsi.KeyAbortedCommand
	}
	return false
}

func statusError(name string, status uint8, sense []byte) *StatusError {
	e := &StatusError{Command: name, Status: scsi.Status(status)}
	if len(sense) > 0 {
		if s, err := scsi.ParseSense(sense); err == nil {
			e.Sense, e.HasSense = s, true
		}
	}
	return e
}

// Device is one logical unit of a session as a blockdev.Device: READ(16),
// WRITE(16) with FUA, SYNCHRONIZE CACHE(16), UNMAP and WRITE SAME(16) of a
// zero block. It has one queue (the session's connection) of the session's
// depth. It is safe for concurrent use.
type Device struct {
	s      *Session
	lun    uint64
	info   blockdev.Info
	shift  uint
	owned  bool
	closed atomic.Bool

	aux    []byte // per-slot 32-byte UNMAP parameter lists, then one zero block
	auxMR  rdma.MR
	zero   []byte
	maxWS  uint64 // blocks per WRITE SAME
	maxUnm uint64 // blocks per UNMAP descriptor
}

var _ blockdev.Device = (*Device)(nil)

const auxStride = 32

// Open logs in to the target a URL names and opens its LUN. Closing the
// Device logs out.
func Open(ctx context.Context, u URL, cfg Config) (*Device, error) {
	if u.Target == "" {
		return nil, fmt.Errorf("%s names no target (want %s://HOST[:PORT]/IQN/LUN)", u, u.Scheme())
	}
	s, err := Login(ctx, u.Transport, u.Addr(), u.Target, cfg)
	if err != nil {
		return nil, err
	}
	d, err := s.Device(ctx, u.LUN)
	if err != nil {
		s.Logout(ctx)
		return nil, err
	}
	d.owned = true
	d.info.Name = u.String()
	return d, nil
}

// Device opens LUN lun of the session for I/O: it clears the unit
// attentions of a new nexus and reads the capacity and block limits.
func (s *Session) Device(ctx context.Context, lun uint64) (*Device, error) {
	if s.params.SessionType != iser.SessionNormal {
		return nil, fmt.Errorf("iscsi: a discovery session has no LUNs")
	}
	var err error
	for range 5 {
		if err = s.simple(ctx, lun, []byte{scsi.OpTestUnitReady, 0, 0, 0, 0, 0}, nil, "test unit ready"); err == nil {
			break
		}
		var se *StatusError
		if !errors.As(err, &se) || !se.HasSense || se.Sense.Key != scsi.KeyUnitAttention {
			return nil, err
		}
	}
	if err != nil {
		return nil, err
	}
	rc := make([]byte, 32)
	cdb := []byte{scsi.OpServiceActionIn16, scsi.SAReadCapacity16, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 32, 0, 0}
	if err := s.simple(ctx, lun, cdb, rc, "read capacity(16)"); err != nil {
		return nil, err
	}
	blocks := binary.BigEndian.Uint64(rc[0:]) + 1
	bs := binary.BigEndian.Uint32(rc[8:])
	lbpme := rc[14]&0x80 != 0
	if bs < 512 || bs > 65536 || bs&(bs-1) != 0 {
		return nil, fmt.Errorf("iscsi: LUN %d has %d-byte blocks", lun, bs)
	}
	shift := uint(0)
	for 1<<shift != bs {
		shift++
	}
	maxXfer := uint64(s.cfg.MaxTransfer) >> shift
	maxWS, maxUnmap := uint64(0xffff), uint64(0xffff)
	bl := make([]byte, 64)
	if err := s.simple(ctx, lun, []byte{scsi.OpInquiry, 1, 0xb0, 0, 64, 0}, bl, "inquiry (block limits)"); err == nil {
		if v := uint64(binary.BigEndian.Uint32(bl[8:])); v != 0 {
			maxXfer = min(maxXfer, v)
		}
		if v := uint64(binary.BigEndian.Uint32(bl[20:])); v != 0 && v != 0xffffffff {
			maxUnmap = min(maxUnmap, v)
		}
		if v := binary.BigEndian.Uint64(bl[36:]); v != 0 {
			maxWS = min(maxWS, v)
		}
	}
	lbpu := false
	lbp := make([]byte, 8)
	if lbpme && s.simple(ctx, lun, []byte{scsi.OpInquiry, 1, 0xb2, 0, 8, 0}, lbp, "inquiry (provisioning)") == nil {
		lbpu = lbp[5]&0x80 != 0
	}
	if maxXfer == 0 {
		return nil, fmt.Errorf("iscsi: LUN %d: %d-byte blocks exceed the transfer limit", lun, bs)
	}
	caps := blockdev.CapFlush | blockdev.CapFUA | blockdev.CapWriteZeroes
	maxZ := maxWS
	if lbpme && lbpu {
		caps |= blockdev.CapDiscard
		maxZ = min(maxZ, maxUnmap)
	}
	d := &Device{s: s, lun: lun, shift: shift, maxWS: maxWS, maxUnm: maxUnmap}
	d.info = blockdev.Info{
		Name:        fmt.Sprintf("%s://%s/%s/%d", URL{Transport: s.tr}.Scheme(), s.addr, s.params.TargetName, lun),
		BlockSize:   int(bs),
		Size:        int64(blocks) << shift,
		Queues:      1,
		QueueDepth:  s.depth,
		MaxTransfer: int(maxXfer << shift),
		MaxZeroes:   int64(maxZ) << shift,
		Caps:        caps,
	}
	d.aux = alignedBuffer(len(s.slots)*auxStride + int(bs))
	d.zero = d.aux[len(s.slots)*auxStride:]
	if s.tr == iser.TransportISER {
		l := s.lk.(*iserLink)
		if d.auxMR, err = l.pd.RegisterMemory(d.aux, rdma.AccessLocalWrite); err != nil {
			return nil, fmt.Errorf("iscsi: registering: %w", err)
		}
	}
	return d, nil
}

// simple runs a command with plain memory and turns a bad status into a
// StatusError.
func (s *Session) simple(ctx context.Context, lun uint64, cdb, dataIn []byte, name string) error {
	cmd := Command{LUN: lun, CDB: cdb, DataIn: dataIn}
	if err := s.Execute(ctx, &cmd); err != nil {
		return fmt.Errorf("iscsi %s: %w", name, err)
	}
	if cmd.Status != scsi.StatusGood {
		return statusError(name, uint8(cmd.Status), cmd.Sense)
	}
	return nil
}

// Session returns the device's session.
func (d *Device) Session() *Session { return d.s }

// LUN returns the logical unit number.
func (d *Device) LUN() uint64 { return d.lun }

// Info implements blockdev.Device.
func (d *Device) Info() blockdev.Info { return d.info }

// Done is closed when the session failed or was closed.
func (d *Device) Done() <-chan struct{} { return d.s.dead }

// buffer is a blockdev.Buffer of a Device.
type buffer struct {
	d        *Device
	mem      []byte
	mr       rdma.MR
	released atomic.Bool
}

func (b *buffer) Bytes() []byte { return b.mem }

func (b *buffer) Release() error {
	if b.released.Swap(true) {
		return nil
	}
	if b.mr != nil {
		return b.mr.Deregister()
	}
	return nil
}

// alignedBuffer returns n bytes aligned to 4096.
func alignedBuffer(n int) []byte {
	b := make([]byte, n+4096)
	off := int((4096 - uintptr(unsafe.Pointer(&b[0]))%4096) % 4096)
	return b[off : off+n : off+n]
}

// AllocBuffer implements blockdev.Device: size bytes, 4096-aligned,
// registered with the session's RDMA protection domain on iSER.
func (d *Device) AllocBuffer(size int) (blockdev.Buffer, error) {
	if size <= 0 {
		return nil, fmt.Errorf("iscsi: buffer of %d bytes: %w", size, blockdev.ErrBuffer)
	}
	b := &buffer{d: d, mem: alignedBuffer(size)}
	if l, ok := d.s.lk.(*iserLink); ok {
		mr, err := l.pd.RegisterMemory(b.mem, rdma.AccessLocalWrite|rdma.AccessRemoteWrite|rdma.AccessRemoteRead)
		if err != nil {
			return nil, fmt.Errorf("iscsi: registering %d bytes: %w", size, err)
		}
		b.mr = mr
	}
	return b, nil
}

// Submit implements blockdev.Device.
func (d *Device) Submit(r *blockdev.Request) error {
	if d.closed.Load() {
		return blockdev.ErrClosed
	}
	if err := blockdev.Check(&d.info, r); err != nil {
		return err
	}
	var b *buffer
	if r.Op == blockdev.OpRead || r.Op == blockdev.OpWrite {
		var ok bool
		if b, ok = r.Buf.(*buffer); !ok || b.d != d || b.released.Load() {
			return blockdev.ErrBuffer
		}
	}
	s := d.s
	sl, err := s.acquire(nil, false)
	if err != nil {
		return err
	}
	sl.kind, sl.lun, sl.dev, sl.req, sl.op = kindCmd, d.lun, d, r, r.Op
	sl.read, sl.write = false, false
	var cdb [16]byte
	lba := uint64(r.Offset) >> d.shift
	nlb := uint64(r.Length) >> d.shift
	switch r.Op {
	case blockdev.OpRead, blockdev.OpWrite:
		cdb[0] = scsi.OpRead16
		sl.read = true
		if r.Op == blockdev.OpWrite {
			cdb[0], sl.read, sl.write = scsi.OpWrite16, false, true
			if r.Flags&blockdev.FUA != 0 {
				cdb[1] = 0x08
			}
		}
		binary.BigEndian.PutUint64(cdb[2:], lba)
		binary.BigEndian.PutUint32(cdb[10:], uint32(nlb))
		sl.buf = b.mem[r.BufOff : r.BufOff+r.Length]
		sl.mr, sl.mrOff = b.mr, r.BufOff
		sl.expLen = uint32(r.Length)
	case blockdev.OpFlush:
		cdb[0] = scsi.OpSyncCache16
		sl.expLen = 0
	case blockdev.OpDiscard:
		cdb[0] = scsi.OpUnmap
		p := d.aux[sl.idx*auxStride : sl.idx*auxStride+24]
		binary.BigEndian.PutUint16(p[0:], 22)
		binary.BigEndian.PutUint16(p[2:], 16)
		clear(p[4:8])
		binary.BigEndian.PutUint64(p[8:], lba)
		binary.BigEndian.PutUint32(p[16:], uint32(nlb))
		clear(p[20:24])
		binary.BigEndian.PutUint16(cdb[7:], 24)
		sl.write, sl.buf, sl.mr, sl.mrOff, sl.expLen = true, p, d.auxMR, sl.idx*auxStride, 24
	case blockdev.OpWriteZeroes:
		cdb[0] = scsi.OpWriteSame16
		binary.BigEndian.PutUint64(cdb[2:], lba)
		binary.BigEndian.PutUint32(cdb[10:], uint32(nlb))
		sl.write, sl.buf, sl.mr, sl.mrOff, sl.expLen = true, d.zero, d.auxMR, len(d.s.slots)*auxStride, uint32(len(d.zero))
	}
	iser.SCSICommand(sl.hdr[:]).Encode(&iser.SCSICommandFields{Final: true, Read: sl.read, Write: sl.write, Attr: iser.AttrSimple,
		LUN: encodeLUN(d.lun), ITT: sl.itt, ExpectedDataTransferLength: sl.expLen, CDB: cdb})
	r.Issued = time.Now()
	if err := s.post(sl); err != nil {
		s.put(sl)
		return err
	}
	return nil
}

// complete delivers a finished request (receive side).
func (d *Device) complete(sl *slot) {
	r := sl.req
	switch {
	case sl.err != nil:
		r.Err = sl.err
	case sl.response != iser.ResponseCompleted:
		r.Err = fmt.Errorf("iscsi %s: the target failed the command (response %#x): %w", sl.op, sl.response, blockdev.ErrIO)
	case sl.status != 0:
		se := statusError(sl.op.String(), sl.status, sl.sense[:sl.senseLen])
		if se.HasSense && se.Sense.Key == scsi.KeyUnitAttention && sl.retries < 3 && !d.closed.Load() {
			// A unit attention (LUN reset, mode change...) fails the
			// command that reports it: send it again.
			sl.retries++
			go d.retry(sl)
			return
		}
		r.Err = se
	case sl.under && (sl.op == blockdev.OpRead || sl.op == blockdev.OpWrite):
		r.Err = fmt.Errorf("iscsi %s: %d bytes short: %w", sl.op, sl.resid, blockdev.ErrIO)
	default:
		r.Err = nil
	}
	r.Completed = time.Now()
	d.s.put(sl)
	blockdev.Complete(r)
}

// retry sends a slot's command again under a new ITT.
func (d *Device) retry(sl *slot) {
	s := d.s
	sl.gen++
	sl.itt = uint32(sl.idx) | uint32(sl.gen&0x7fff)<<16
	iser.BHS(sl.hdr[:]).SetITT(sl.itt)
	sl.err, sl.response, sl.status, sl.senseLen, sl.resid, sl.over, sl.under, sl.dataIn = nil, 0, 0, 0, 0, false, false, 0
	if err := s.post(sl); err != nil {
		sl.err = err
		sl.state.Store(slotFlight)
		d.complete(sl)
	}
}

// Close implements blockdev.Device: it logs out if Open made the session,
// else it only stops further submissions.
func (d *Device) Close() error {
	if d.closed.Swap(true) {
		return nil
	}
	if d.owned {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		d.s.Logout(ctx)
		d.s.Close()
	}
	if d.auxMR != nil {
		d.auxMR.Deregister()
	}
	return nil
}
