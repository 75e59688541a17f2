package initiator

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/rdisk/rdisk/backstore"
	"github.com/rdisk/rdisk/blockdev"
	"github.com/rdisk/rdisk/rdma"
	"github.com/rdisk/rdisk/rdma/rdmaq"
	"github.com/rdisk/rdisk/scsi"
	"github.com/rdisk/rdisk/scsi/host"
	"github.com/rdisk/rdisk/srp"
)

// Device is one logical unit of a session as a blockdev.Device. The SCSI
// host layer (scsi/host) probes it and builds each request's command:
// READ(16)/WRITE(16) (FUA), SYNCHRONIZE CACHE(16), UNMAP, WRITE SAME(16)
// of a zero block. Request.Queue picks the channel; each channel's queue
// depth is bounded by the target's credits. It is safe for concurrent use.
//
// The Device follows the LU's capacity (a host.Live): when a command
// reports CAPACITY DATA HAS CHANGED, or the target sends an SRP_AER_REQ
// saying so, READ CAPACITY(16) is read again and Info and LU describe the
// new size; the command that reported it is sent again once the new size is
// in, checked and built against it.
//
// It follows the path's ALUA state too (a host.Path: blockdev.PathReporter)
// and tells the LU's identity (blockdev.Identifier): a command refused for
// the path's asymmetric access state (NOT READY 04h/0Ah, 0Bh, 0Ch, 12h)
// completes with a *blockdev.PathError (blockdev.ErrPath); that refusal,
// an ASYMMETRIC ACCESS STATE CHANGED unit attention or an SRP_AER_REQ
// saying so makes the Device read REPORT TARGET PORT GROUPS again.
type Device struct {
	s      *Session
	lun    uint64
	live   *host.Live
	path   *host.Path
	owned  bool
	closed atomic.Bool

	zero   []byte  // one block of zeroes: WRITE SAME's data-out
	zeroMR rdma.MR // zero, registered in the session's PD
}

var (
	_ blockdev.Device       = (*Device)(nil)
	_ blockdev.PathReporter = (*Device)(nil)
	_ blockdev.Identifier   = (*Device)(nil)
)

var _ host.Runner = (*Session)(nil)

// RunSCSI implements host.Runner: c runs on the first channel, once.
func (s *Session) RunSCSI(ctx context.Context, c *host.Command) error {
	sc := Command{LUN: c.LUN, CDB: c.CDB, Dir: c.Dir, Data: c.Data}
	err := s.Exec(ctx, 0, &sc)
	c.Status, c.Sense = sc.Status, sc.Sense
	if c.Dir == scsi.DirIn && sc.Flags&srp.RspFlagDIUnder != 0 {
		c.Resid = sc.Residual
	}
	var se *SCSIError
	if errors.As(err, &se) {
		return nil // the status is the outcome
	}
	return err
}

// Device opens LUN lun for I/O: host.Probe clears the unit attentions of
// the new nexus, checks the device type and reads the capacity, the block
// limits and provisioning VPD pages and the write protection.
func (s *Session) Device(ctx context.Context, lun uint64) (*Device, error) {
	lu, err := host.Probe(ctx, s, lun, s.cfg.MaxTransfer)
	if err != nil {
		return nil, fmt.Errorf("srp: %w", err)
	}
	depth := s.chans[0].depth
	for _, ch := range s.chans[1:] {
		depth = min(depth, ch.depth)
	}
	u := srp.URL{IDExt: s.target.Ext(), IOCGUID: s.target.GUID(), LUN: lun, HasLUN: true, Port: srp.DefaultPort}
	if h, p, err := net.SplitHostPort(s.addr); err == nil {
		u.Host = h
		u.Port, _ = strconv.Atoi(p)
	}
	path, err := host.NewPath(ctx, s, lun, lu.Pages.Inquiry, s.log.With("device", u.String()))
	if err != nil {
		return nil, fmt.Errorf("srp: %w", err)
	}
	d := &Device{s: s, lun: lun, live: host.NewLive(lu, lu.Info(u.String(), len(s.chans), depth), s.log),
		path: path, zero: backstore.AlignedBuffer(lu.BlockSize, 4096)}
	if d.zeroMR, err = s.pd.RegisterMemory(d.zero, rdma.AccessLocalWrite); err != nil {
		return nil, fmt.Errorf("srp: LUN %d: registering the zero block: %w", lun, err)
	}
	s.addDevice(d)
	return d, nil
}

// Open logs in to the target port a URL names and opens its LUN (the URL's,
// or the first one REPORT LUNS lists). Closing the Device logs out.
func Open(ctx context.Context, p rdma.Provider, u srp.URL, cfg Config) (*Device, error) {
	s, err := Login(ctx, p, u.Addr(), u.TargetPortID(), cfg)
	if err != nil {
		return nil, err
	}
	lun := u.LUN
	if !u.HasLUN {
		luns, err := s.ReportLUNs(ctx)
		if err != nil {
			s.Close()
			return nil, err
		}
		if len(luns) == 0 {
			s.Close()
			return nil, fmt.Errorf("srp: target port %s at %s has no LUN", u.TargetPortID(), u.Addr())
		}
		lun = luns[0]
	}
	d, err := s.Device(ctx, lun)
	if err != nil {
		s.Close()
		return nil, err
	}
	d.owned = true
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
// itself when the target reports a capacity change; Refresh is for a
// caller that learned of one otherwise.
func (d *Device) Refresh(ctx context.Context) error {
	if err := d.live.Refresh(ctx, d.s); err != nil {
		return fmt.Errorf("srp: %w", err)
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
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := d.path.Refresh(ctx)
	if err != nil {
		return st, fmt.Errorf("srp: %w", err)
	}
	return st, nil
}

// DiskID implements blockdev.Identifier: the LU's NAA designator from VPD
// page 83h as "naa." and hex (host.DeviceID.DiskID for the others).
func (d *Device) DiskID() string { return d.path.DiskID() }

// Path returns the device's ALUA path state.
func (d *Device) Path() *host.Path { return d.path }

// AllocBuffer implements blockdev.Device.
func (d *Device) AllocBuffer(size int) (blockdev.Buffer, error) { return d.s.AllocBuffer(size) }

// Close implements blockdev.Device: it logs out if Open made the session,
// else it only stops further submissions (a write-zeroes still in flight
// then may fail: its zero block is released).
func (d *Device) Close() error {
	if d.closed.Swap(true) {
		return nil
	}
	d.path.Close()
	d.s.removeDevice(d)
	var err error
	if d.owned {
		err = d.s.Close()
	}
	d.zeroMR.Deregister()
	return err
}

// Submit implements blockdev.Device. It does not allocate.
func (d *Device) Submit(r *blockdev.Request) error { return d.submit(r, 0) }

// submit checks r against the current capacity, builds its command from
// the same snapshot and posts it; retries is how many times it was sent
// already (a request sent again after a capacity refresh).
func (d *Device) submit(r *blockdev.Request, retries int) error {
	lu, err := d.live.Check(r)
	if err != nil {
		return err
	}
	if d.closed.Load() || d.s.closed.Load() {
		return blockdev.ErrClosed
	}
	var buf *rdmaq.Buffer
	if r.Op == blockdev.OpRead || r.Op == blockdev.OpWrite {
		b, ok := r.Buf.(*rdmaq.Buffer)
		if !ok || !b.Usable(d.s) {
			return blockdev.ErrBuffer
		}
		buf = b
	}
	ch := d.s.chans[uint(r.Queue)%uint(len(d.s.chans))]
	sl, err := ch.acquire(nil)
	if err != nil {
		return err
	}
	sl.S.kind, sl.S.req, sl.S.dev, sl.S.retries = kindIO, r, d, retries
	var cdb [16]byte
	io, err := lu.BuildIO(&cdb, sl.S.table, r) // the UNMAP parameters go in the slot's remote-readable area
	if err != nil {
		ch.release(sl, true)
		return err
	}
	sl.S.name = io.Name
	x := xfer{dir: io.Dir}
	switch io.Data {
	case host.DataBuffer:
		x.mr, x.off, x.n = buf.MR(), r.BufOff, r.Length
	case host.DataParam:
		x.n, x.param = io.Len, true
	case host.DataZeroBlock:
		if io.Len > len(d.zero) {
			// The block size grew since the open: the zero block
			// registered then is too small.
			ch.release(sl, true)
			return fmt.Errorf("srp: LUN %d: %d-byte blocks, %d-byte zero block: %w", d.lun, io.Len, len(d.zero), blockdev.ErrIO)
		}
		x.mr, x.n = d.zeroMR, io.Len
	}
	n, data, err := ch.build(sl, d.lun, cdb[:], x)
	if err != nil {
		ch.q.Unmap(sl)
		ch.release(sl, true)
		return err
	}
	if retries == 0 {
		r.Issued = time.Now()
	}
	if err := ch.post(sl, n, data); err != nil {
		ch.release(sl, true)
		return err
	}
	return nil
}

// refreshAndResubmit runs on its own goroutine for a request that reported
// CAPACITY DATA HAS CHANGED (the completion goroutine must not wait for
// the READ CAPACITY): it re-reads the capacity, then sends the request
// again, checked and built against the new size, or completes it with the
// error that stops it.
func (d *Device) refreshAndResubmit(r *blockdev.Request, retries int) {
	d.live.UnitAttention(context.Background(), d.s, d.lun, host.CapacityChanged)
	if err := d.submit(r, retries); err != nil {
		r.Err = err
		r.Completed = time.Now()
		blockdev.Complete(r)
	}
}

// addDevice registers d for the session's asynchronous events.
func (s *Session) addDevice(d *Device) {
	s.devMu.Lock()
	s.devs = append(s.devs, d)
	s.devMu.Unlock()
}

// removeDevice forgets a closed device.
func (s *Session) removeDevice(d *Device) {
	s.devMu.Lock()
	for i, x := range s.devs {
		if x == d {
			s.devs = append(s.devs[:i], s.devs[i+1:]...)
			break
		}
	}
	s.devMu.Unlock()
}

// capacityChanged re-reads the capacity of the open devices of LUN lun
// (an SRP_AER_REQ reported CAPACITY DATA HAS CHANGED), each on its own
// goroutine: it is called on a completion goroutine.
func (s *Session) capacityChanged(lun uint64) {
	s.devMu.Lock()
	defer s.devMu.Unlock()
	for _, d := range s.devs {
		if d.lun == lun && !d.closed.Load() {
			go d.live.UnitAttention(context.Background(), s, lun, host.CapacityChanged)
		}
	}
}

// aluaChanged reads the ALUA state of the open devices of LUN lun again (an
// SRP_AER_REQ reported ASYMMETRIC ACCESS STATE CHANGED), each on its own
// goroutine.
func (s *Session) aluaChanged(lun uint64) {
	s.devMu.Lock()
	defer s.devMu.Unlock()
	for _, d := range s.devs {
		if d.lun == lun && !d.closed.Load() {
			d.path.RefreshAsync()
		}
	}
}

// LUNInfo describes one logical unit, as Discover lists them.
type LUNInfo struct {
	LUN       uint64 `json:"lun"`
	URL       string `json:"url"`
	Vendor    string `json:"vendor"`
	Product   string `json:"product"`
	Revision  string `json:"revision"`
	Type      uint8  `json:"device_type"`
	Blocks    uint64 `json:"blocks"`
	BlockSize int    `json:"block_size"`
	Size      uint64 `json:"size_bytes"`
	Thin      bool   `json:"thin"`
}

// Discover logs in to the target port a URL names (one channel), lists its
// logical units with REPORT LUNS, INQUIRY and READ CAPACITY(16), and logs
// out. SRP has no discovery service over RDMA/CM (srp_daemon uses
// InfiniBand management datagrams), so the URL must name the target port;
// rdisk's default one is assumed when it does not.
func Discover(ctx context.Context, p rdma.Provider, u srp.URL, cfg Config) ([]LUNInfo, error) {
	cfg.Channels = 1
	if cfg.QueueDepth == 0 {
		cfg.QueueDepth = 4
	}
	s, err := Login(ctx, p, u.Addr(), u.TargetPortID(), cfg)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	luns, err := s.ReportLUNs(ctx)
	if err != nil {
		return nil, err
	}
	var out []LUNInfo
	for _, lun := range luns {
		inq, err := s.Inquiry(ctx, lun)
		if err != nil {
			return nil, err
		}
		lu := u
		lu.LUN, lu.HasLUN = lun, true
		e := LUNInfo{LUN: lun, URL: lu.String(), Vendor: inq.Vendor, Product: inq.Product, Revision: inq.Revision, Type: inq.DeviceType}
		if capa, err := s.ReadCapacity(ctx, lun); err == nil {
			e.Blocks, e.BlockSize, e.Thin = capa.Blocks, capa.BlockSize, capa.LBPME
			e.Size = capa.Blocks * uint64(capa.BlockSize)
		} else if !errors.Is(err, blockdev.ErrUnsupported) {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}
