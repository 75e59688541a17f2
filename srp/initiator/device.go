package initiator

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/rdisk/rdisk/srp"
	"net"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/rdisk/rdisk/blockdev"
	"github.com/rdisk/rdisk/rdma"
	"github.com/rdisk/rdisk/scsi"
)

// Device is one logical unit of a session as a blockdev.Device: reads and
// writes become READ(16)/WRITE(16) (FUA), flushes SYNCHRONIZE CACHE(16),
// discards UNMAP and write-zeroes WRITE SAME(16) with NDOB. Request.Queue
// picks the channel; each channel's queue depth is bounded by the target's
// credits. It is safe for concurrent use.
type Device struct {
	s      *Session
	lun    uint64
	info   blockdev.Info
	shift  uint
	owned  bool
	closed atomic.Bool
}

var _ blockdev.Device = (*Device)(nil)

// Device opens LUN lun for I/O: it clears the unit attentions of the new
// nexus (TEST UNIT READY), reads the capacity, the write protection (MODE
// SENSE) and the block limits (VPD page B0h).
func (s *Session) Device(ctx context.Context, lun uint64) (*Device, error) {
	tur := &Command{LUN: lun, CDB: make([]byte, 6)}
	if err := s.execUA(ctx, tur); err != nil {
		return nil, fmt.Errorf("srp: LUN %d: TEST UNIT READY: %w", lun, err)
	}
	capa, err := s.ReadCapacity(ctx, lun)
	if err != nil {
		return nil, fmt.Errorf("srp: LUN %d: %w", lun, err)
	}
	bs := capa.BlockSize
	if bs < 512 || bs > 65536 || bs&(bs-1) != 0 {
		return nil, fmt.Errorf("srp: LUN %d: unsupported block size %d", lun, bs)
	}
	shift := uint(0)
	for 1<<shift != bs {
		shift++
	}
	if capa.Blocks > uint64(1<<62)>>shift {
		return nil, fmt.Errorf("srp: LUN %d: %d blocks is too large", lun, capa.Blocks)
	}
	maxXfer := s.cfg.MaxTransfer
	maxZero := int64(1<<30) >> shift
	var maxUnmap uint64
	page := make([]byte, 64)
	vpd := &Command{LUN: lun, CDB: []byte{scsi.OpInquiry, 1, 0xb0, 0, 64, 0}, Dir: scsi.DirIn, Data: page}
	if err := s.execUA(ctx, vpd); err == nil && page[1] == 0xb0 {
		if m := binary.BigEndian.Uint32(page[8:12]); m != 0 {
			maxXfer = min(maxXfer, int(m)<<shift)
		}
		if m := binary.BigEndian.Uint64(page[36:44]); m != 0 {
			maxZero = min(maxZero, int64(min(m, 1<<40)))
		}
		maxUnmap = uint64(binary.BigEndian.Uint32(page[20:24]))
	}
	maxXfer -= maxXfer % bs
	if maxXfer < bs {
		return nil, fmt.Errorf("srp: LUN %d: %d-byte blocks exceed the %d-byte transfer limit", lun, bs, s.cfg.MaxTransfer)
	}
	caps := blockdev.CapFlush | blockdev.CapFUA | blockdev.CapWriteZeroes
	if capa.Thin {
		caps |= blockdev.CapDiscard
		if maxUnmap != 0 {
			maxZero = min(maxZero, int64(maxUnmap))
		}
	}
	ms := make([]byte, 4)
	mode := &Command{LUN: lun, CDB: []byte{scsi.OpModeSense6, 0x08, 0x3f, 0, 4, 0}, Dir: scsi.DirIn, Data: ms}
	if err := s.execUA(ctx, mode); err == nil && ms[2]&0x80 != 0 {
		caps |= blockdev.CapReadOnly
	}
	maxZero = min(maxZero, int64(0xffffffff))
	depth := s.chans[0].depth
	for _, ch := range s.chans[1:] {
		depth = min(depth, ch.depth)
	}
	u := srp.URL{IDExt: s.target.Ext(), IOCGUID: s.target.GUID(), LUN: lun, HasLUN: true, Port: srp.DefaultPort}
	if h, p, err := net.SplitHostPort(s.addr); err == nil {
		u.Host = h
		u.Port, _ = strconv.Atoi(p)
	}
	return &Device{
		s: s, lun: lun, shift: shift,
		info: blockdev.Info{
			Name: u.String(), BlockSize: bs, Size: int64(capa.Blocks) << shift, Queues: len(s.chans), QueueDepth: depth,
			MaxTransfer: maxXfer, MaxZeroes: maxZero << shift, Caps: caps,
		},
	}, nil
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

// Info implements blockdev.Device.
func (d *Device) Info() blockdev.Info { return d.info }

// AllocBuffer implements blockdev.Device.
func (d *Device) AllocBuffer(size int) (blockdev.Buffer, error) { return d.s.AllocBuffer(size) }

// Close implements blockdev.Device: it logs out if Open made the session,
// else it only stops further submissions.
func (d *Device) Close() error {
	d.closed.Store(true)
	if d.owned {
		return d.s.Close()
	}
	return nil
}

// Submit implements blockdev.Device. It does not allocate.
func (d *Device) Submit(r *blockdev.Request) error {
	if err := blockdev.Check(&d.info, r); err != nil {
		return err
	}
	if d.closed.Load() || d.s.closed.Load() {
		return blockdev.ErrClosed
	}
	var buf *buffer
	if r.Op == blockdev.OpRead || r.Op == blockdev.OpWrite {
		b, ok := r.Buf.(*buffer)
		if !ok || b.s != d.s || b.released.Load() {
			return blockdev.ErrBuffer
		}
		buf = b
	}
	ch := d.s.chans[uint(r.Queue)%uint(len(d.s.chans))]
	sl, err := ch.acquire(nil)
	if err != nil {
		return err
	}
	sl.kind, sl.req = kindIO, r
	lba := uint64(r.Offset) >> d.shift
	nlb := uint32(r.Length >> d.shift)
	var cdb [16]byte
	x := xfer{}
	switch r.Op {
	case blockdev.OpRead, blockdev.OpWrite:
		cdb[0], sl.name, x.dir = scsi.OpRead16, "read", scsi.DirIn
		if r.Op == blockdev.OpWrite {
			cdb[0], sl.name, x.dir = scsi.OpWrite16, "write", scsi.DirOut
		}
		if r.Flags&blockdev.FUA != 0 {
			cdb[1] = 0x08
		}
		binary.BigEndian.PutUint64(cdb[2:], lba)
		binary.BigEndian.PutUint32(cdb[10:], nlb)
		x.mr, x.off, x.n = buf.mr, r.BufOff, r.Length
	case blockdev.OpFlush:
		cdb[0], sl.name = scsi.OpSyncCache16, "synchronize cache"
	case blockdev.OpWriteZeroes:
		cdb[0], cdb[1], sl.name = scsi.OpWriteSame16, 0x01, "write same" // NDOB
		binary.BigEndian.PutUint64(cdb[2:], lba)
		binary.BigEndian.PutUint32(cdb[10:], nlb)
	case blockdev.OpDiscard:
		cdb[0], sl.name = scsi.OpUnmap, "unmap"
		p := sl.table[:24]
		clear(p)
		binary.BigEndian.PutUint16(p[0:], 22)
		binary.BigEndian.PutUint16(p[2:], 16)
		binary.BigEndian.PutUint64(p[8:], lba)
		binary.BigEndian.PutUint32(p[16:], nlb)
		binary.BigEndian.PutUint16(cdb[7:], 24)
		x = xfer{dir: scsi.DirOut, n: 24, param: true}
	}
	if err := ch.build(sl, d.lun, cdb[:], x); err != nil {
		ch.release(sl, true)
		return err
	}
	r.Issued = time.Now()
	if err := ch.post(sl); err != nil {
		if sl.mapped {
			sl.fmr.Invalidate()
			sl.mapped = false
		}
		ch.release(sl, true)
		return err
	}
	return nil
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
			return nil, fmt.Errorf("srp: LUN %d: %w", lun, err)
		}
		lu := u
		lu.LUN, lu.HasLUN = lun, true
		e := LUNInfo{LUN: lun, URL: lu.String(), Vendor: inq.Vendor, Product: inq.Product, Revision: inq.Revision, Type: inq.DeviceType}
		if capa, err := s.ReadCapacity(ctx, lun); err == nil {
			e.Blocks, e.BlockSize, e.Thin = capa.Blocks, capa.BlockSize, capa.Thin
			e.Size = capa.Blocks * uint64(capa.BlockSize)
		} else if !errors.Is(err, blockdev.ErrUnsupported) {
			return nil, fmt.Errorf("srp: LUN %d: %w", lun, err)
		}
		out = append(out, e)
	}
	return out, nil
}
