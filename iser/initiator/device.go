package initiator

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/rdisk/rdisk/backstore"
	"github.com/rdisk/rdisk/blockdev"
	"github.com/rdisk/rdisk/iser"
	"github.com/rdisk/rdisk/rdma"
	"github.com/rdisk/rdisk/rdma/rdmaq"
	"github.com/rdisk/rdisk/scsi"
	"github.com/rdisk/rdisk/scsi/host"
)

// StatusError is a command the target completed with a SCSI status other
// than GOOD: the SCSI host layer's error, shared with the SRP initiator. It
// matches the blockdev sentinel of its status and sense with errors.Is
// (host.StatusError.Class).
type StatusError = host.StatusError

// Device is one logical unit of a session as a blockdev.Device. The SCSI
// host layer (scsi/host) probes it and builds each request's command:
// READ(16), WRITE(16) with FUA, SYNCHRONIZE CACHE(16), UNMAP and WRITE
// SAME(16) of a zero block. It has one queue (the session's connection) of
// the session's depth. It is safe for concurrent use.
//
// The Device follows the LU's capacity (a host.Live): a command that
// reports CAPACITY DATA HAS CHANGED makes it read READ CAPACITY(16) again,
// so that Info and LU describe the new size, before the command is sent
// again, checked and built against it.
//
// It follows the path's ALUA state too (a host.Path: blockdev.PathReporter)
// and tells the LU's identity (blockdev.Identifier): a command refused for
// the path's asymmetric access state (NOT READY 04h/0Ah, 0Bh, 0Ch, 12h)
// completes with a *blockdev.PathError (blockdev.ErrPath), and that
// refusal or an ASYMMETRIC ACCESS STATE CHANGED unit attention makes the
// Device read REPORT TARGET PORT GROUPS again.
type Device struct {
	s      *Session
	lun    uint64
	live   *host.Live
	path   *host.Path
	owned  bool
	closed atomic.Bool

	aux   []byte // per-slot 32-byte UNMAP parameter lists, then one zero block
	auxMR rdma.MR
	zero  []byte
}

var (
	_ blockdev.Device       = (*Device)(nil)
	_ blockdev.PathReporter = (*Device)(nil)
	_ blockdev.Identifier   = (*Device)(nil)
)

var _ host.Runner = (*Session)(nil)

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
	d, err := s.device(ctx, u.LUN, u.String())
	if err != nil {
		s.Logout(ctx)
		return nil, err
	}
	d.owned = true
	return d, nil
}

// RunSCSI implements host.Runner with Execute.
func (s *Session) RunSCSI(ctx context.Context, c *host.Command) error {
	cmd := Command{LUN: c.LUN, CDB: c.CDB}
	switch c.Dir {
	case scsi.DirIn:
		cmd.DataIn = c.Data
	case scsi.DirOut:
		cmd.DataOut = c.Data
	}
	if err := s.Execute(ctx, &cmd); err != nil {
		return err
	}
	c.Status, c.Sense = cmd.Status, cmd.Sense
	if c.Dir == scsi.DirIn && cmd.Underflw {
		c.Resid = cmd.Residual
	}
	return nil
}

// Device opens LUN lun of the session for I/O: host.Probe clears the unit
// attentions of the new nexus, checks the device type and reads the
// capacity, the block limits and provisioning VPD pages and the write
// protection.
func (s *Session) Device(ctx context.Context, lun uint64) (*Device, error) {
	return s.device(ctx, lun, fmt.Sprintf("%s://%s/%s/%d", URL{Transport: s.tr}.Scheme(), s.addr, s.params.TargetName, lun))
}

// device is Device with the device's name.
func (s *Session) device(ctx context.Context, lun uint64, name string) (*Device, error) {
	if s.params.SessionType != iser.SessionNormal {
		return nil, fmt.Errorf("iscsi: a discovery session has no LUNs")
	}
	lu, err := host.Probe(ctx, s, lun, s.cfg.MaxTransfer)
	if err != nil {
		return nil, fmt.Errorf("iscsi: %w", err)
	}
	path, err := host.NewPath(ctx, s, lun, lu.Pages.Inquiry, s.log.With("device", name))
	if err != nil {
		return nil, fmt.Errorf("iscsi: %w", err)
	}
	d := &Device{s: s, lun: lun, live: host.NewLive(lu, lu.Info(name, 1, s.depth), s.log), path: path}
	d.aux = backstore.AlignedBuffer(len(s.slots)*auxStride+lu.BlockSize, 4096)
	d.zero = d.aux[len(s.slots)*auxStride:]
	if s.tr == iser.TransportISER {
		l := s.lk.(*iserLink)
		if d.auxMR, err = l.pd.RegisterMemory(d.aux, rdma.AccessLocalWrite); err != nil {
			return nil, fmt.Errorf("iscsi: LUN %d: registering the UNMAP parameters and zero block: %w", lun, err)
		}
	}
	return d, nil
}

// Session returns the device's session.
func (d *Device) Session() *Session { return d.s }

// LUN returns the logical unit number.
func (d *Device) LUN() uint64 { return d.lun }

// LU returns what the probe learned about the logical unit, with the
// capacity last read (it follows CAPACITY DATA HAS CHANGED).
func (d *Device) LU() host.LU { return d.live.LU() }

// Info implements blockdev.Device. Size is the capacity last read: it
// follows the LU's resizes (see Device).
func (d *Device) Info() blockdev.Info { return d.live.Info() }

// Refresh reads the LU's capacity again (READ CAPACITY(16)) and, when it
// changed, makes Info and LU describe the new one. The Device does it by
// itself when a command reports a capacity change; Refresh is for a caller
// that learned of one otherwise (iSCSI has no event for it: the unit
// attention waits for the next command).
func (d *Device) Refresh(ctx context.Context) error {
	if err := d.live.Refresh(ctx, d.s); err != nil {
		return fmt.Errorf("iscsi: %w", err)
	}
	return nil
}

// AccessState implements blockdev.PathReporter: the ALUA state of the
// path's target port group (blockdev.AccessUnknown when the LU reports no
// ALUA). It is an atomic load.
func (d *Device) AccessState() blockdev.AccessState { return d.path.AccessState() }

// RefreshAccessState implements blockdev.PathReporter: it reads VPD page
// 83h and REPORT TARGET PORT GROUPS now.
func (d *Device) RefreshAccessState() (blockdev.AccessState, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d.s.cfg.CommandTimeout+5*time.Second)
	defer cancel()
	st, err := d.path.Refresh(ctx)
	if err != nil {
		return st, fmt.Errorf("iscsi: %w", err)
	}
	return st, nil
}

// DiskID implements blockdev.Identifier: the LU's NAA designator from VPD
// page 83h as "naa." and hex (host.DeviceID.DiskID for the others).
func (d *Device) DiskID() string { return d.path.DiskID() }

// Path returns the device's ALUA path state.
func (d *Device) Path() *host.Path { return d.path }

// Done is closed when the session failed or was closed.
func (d *Device) Done() <-chan struct{} { return d.s.dead }

// AllocBuffer implements blockdev.Device: size bytes, 4096-aligned,
// registered with the session's RDMA protection domain on iSER.
func (d *Device) AllocBuffer(size int) (blockdev.Buffer, error) {
	if size <= 0 {
		return nil, fmt.Errorf("iscsi: buffer of %d bytes: %w", size, blockdev.ErrBuffer)
	}
	var pd rdma.PD // plain memory on iSCSI/TCP
	if l, ok := d.s.lk.(*iserLink); ok {
		pd = l.pd
	}
	b, err := rdmaq.NewBuffer(pd, size, rdma.AccessLocalWrite|rdma.AccessRemoteWrite|rdma.AccessRemoteRead, d)
	if err != nil {
		return nil, fmt.Errorf("iscsi: %w", err)
	}
	return b, nil
}

// Submit implements blockdev.Device. It does not allocate.
func (d *Device) Submit(r *blockdev.Request) error { return d.submit(r, 0) }

// submit checks r against the current capacity, builds its command from
// the same snapshot and posts it; retries is how many times it was sent
// already (a request sent again after a capacity refresh).
func (d *Device) submit(r *blockdev.Request, retries int) error {
	if d.closed.Load() {
		return blockdev.ErrClosed
	}
	lu, err := d.live.Check(r)
	if err != nil {
		return err
	}
	var b *rdmaq.Buffer
	if r.Op == blockdev.OpRead || r.Op == blockdev.OpWrite {
		var ok bool
		if b, ok = r.Buf.(*rdmaq.Buffer); !ok || !b.Usable(d) {
			return blockdev.ErrBuffer
		}
	}
	s := d.s
	sl, err := s.acquire(nil, false)
	if err != nil {
		return err
	}
	sl.kind, sl.lun, sl.dev, sl.req, sl.op, sl.retries = kindCmd, d.lun, d, r, r.Op, retries
	var cdb [16]byte
	pOff := sl.idx * auxStride
	io, err := lu.BuildIO(&cdb, d.aux[pOff:pOff+auxStride], r)
	if err != nil {
		s.put(sl)
		return err
	}
	sl.read, sl.write = io.Dir == scsi.DirIn, io.Dir == scsi.DirOut
	switch io.Data {
	case host.DataBuffer:
		sl.buf, sl.mr, sl.mrOff = b.Bytes()[r.BufOff:r.BufOff+r.Length], b.MR(), r.BufOff
	case host.DataParam:
		sl.buf, sl.mr, sl.mrOff = d.aux[pOff:pOff+io.Len], d.auxMR, pOff
	case host.DataZeroBlock:
		if io.Len > len(d.zero) {
			// The block size grew since the open: the zero block
			// allocated then is too small.
			s.put(sl)
			return fmt.Errorf("iscsi: LUN %d: %d-byte blocks, %d-byte zero block: %w", d.lun, io.Len, len(d.zero), blockdev.ErrIO)
		}
		sl.buf, sl.mr, sl.mrOff = d.zero[:io.Len], d.auxMR, len(d.s.slots)*auxStride
	}
	sl.expLen = uint32(io.Len)
	iser.SCSICommand(sl.hdr[:]).Encode(&iser.SCSICommandFields{Final: true, Read: sl.read, Write: sl.write, Attr: iser.AttrSimple,
		LUN: encodeLUN(d.lun), ITT: sl.itt, ExpectedDataTransferLength: sl.expLen, CDB: cdb})
	if retries == 0 {
		r.Issued = time.Now()
	}
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
		st, sense := scsi.Status(sl.status), sl.sense[:sl.senseLen]
		if host.Retry(st, sense, sl.retries) && !d.closed.Load() {
			// A unit attention (LUN reset, mode change...) fails the
			// command that reports it, BUSY and TASK SET FULL a command
			// the task set had no room for: send it again, from another
			// goroutine, since posting may wait for the command window
			// that this receive side opens.
			sl.retries++
			ua := host.ParseUnitAttention(st, sense)
			d.path.UnitAttention(ua)
			if ua == host.CapacityChanged {
				// READ CAPACITY first, which needs a slot: this one
				// goes back, and the request is submitted again on
				// a new one once the capacity is in.
				r, retries := sl.req, sl.retries
				d.s.put(sl)
				go d.refreshAndResubmit(r, retries)
				return
			}
			go d.retry(sl, ua)
			return
		}
		r.Err = host.NewStatusError("iscsi", host.IOName(sl.op), st, sense)
		if as, ok := d.path.Failed(st, sense); ok {
			r.Err = host.PathError(as, r.Err)
		}
	case sl.under && (sl.op == blockdev.OpRead || sl.op == blockdev.OpWrite):
		r.Err = fmt.Errorf("iscsi %s: %d bytes short: %w", sl.op, sl.resid, blockdev.ErrIO)
	default:
		r.Err = nil
	}
	r.Completed = time.Now()
	d.s.put(sl)
	blockdev.Complete(r)
}

// retry sends a slot's command again under a new ITT, after logging a
// change of the LUN inventory (ua).
func (d *Device) retry(sl *slot, ua host.UnitAttention) {
	s := d.s
	if ua == host.LUNsChanged {
		d.live.UnitAttention(context.Background(), s, d.lun, ua) // logs; runs no command
	}
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

// refreshAndResubmit runs on its own goroutine for a request that reported
// CAPACITY DATA HAS CHANGED: it re-reads the capacity, then submits the
// request again, checked and built against the new size, or completes it
// with the error that stops it.
func (d *Device) refreshAndResubmit(r *blockdev.Request, retries int) {
	d.live.UnitAttention(context.Background(), d.s, d.lun, host.CapacityChanged)
	if err := d.submit(r, retries); err != nil {
		r.Err = err
		r.Completed = time.Now()
		blockdev.Complete(r)
	}
}

// Close implements blockdev.Device: it logs out if Open made the session,
// else it only stops further submissions.
func (d *Device) Close() error {
	if d.closed.Swap(true) {
		return nil
	}
	d.path.Close()
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
