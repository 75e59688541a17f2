package scsi

import (
	"fmt"
	"hash/fnv"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/rdisk/rdisk/backstore"
)

// Inquiry identity defaults.
const (
	DefaultVendor   = "RDISK"
	DefaultProduct  = "RDISK DISK"
	DefaultRevision = "0001"
)

// LUConfig describes a logical unit: its identity and its SBC limits. The
// zero value is a valid configuration.
type LUConfig struct {
	// Vendor (8 characters), Product (16) and Revision (4) fill the
	// standard INQUIRY data; empty strings mean DefaultVendor,
	// DefaultProduct, DefaultRevision. Printable ASCII only.
	Vendor, Product, Revision string
	// Serial is the unit serial number (VPD page 80h) and seeds the
	// derived identifiers; empty means a serial derived from the disk
	// geometry and Name. At most 64 printable ASCII characters.
	Serial string
	// Name names the LU in derived identifiers (typically the
	// configuration's LU name); optional.
	Name string
	// NAA is the NAA designator of VPD page 83h, 8 or 16 bytes with the
	// NAA field in the top nibble. Empty means a locally assigned NAA 3
	// identifier derived from Serial (FNV-1a), stable across restarts.
	NAA []byte
	// EUI64 adds an EUI-64 designator to VPD page 83h when non-zero.
	EUI64 [8]byte
	// ReadOnly write-protects the LU in addition to a read-only disk.
	ReadOnly bool
	// WriteThrough disables the write cache (caching mode page WCE=0):
	// every write is made durable (FUA) before it completes. By default
	// WCE=1 and SYNCHRONIZE CACHE flushes the disk.
	WriteThrough bool
	// Rotational reports a rotating medium in VPD page B1h; by default
	// the LU reports a non-rotating medium (1).
	Rotational bool
	// PhysicalBlockExp is the LOGICAL BLOCKS PER PHYSICAL BLOCK EXPONENT
	// of READ CAPACITY(16) (0: one logical block per physical block).
	PhysicalBlockExp uint8
	// MaxTransferBlocks is the MAXIMUM TRANSFER LENGTH of the block limits
	// page, enforced on reads and writes; 0 means no limit. Transports set
	// it from their largest data buffer.
	MaxTransferBlocks uint32
	// OptimalTransferBlocks is the OPTIMAL TRANSFER LENGTH (0: not
	// reported).
	OptimalTransferBlocks uint32
	// MaxWriteSameBlocks is the MAXIMUM WRITE SAME LENGTH (0: no limit).
	MaxWriteSameBlocks uint64
	// MaxCompareAndWriteBlocks is the MAXIMUM COMPARE AND WRITE LENGTH,
	// 1-255; 0 means 255.
	MaxCompareAndWriteBlocks uint8
	// NoReservations turns reservations off, as LIO's emulate_pr=0:
	// PERSISTENT RESERVE IN/OUT and RESERVE/RELEASE(6/10) fail with
	// INVALID COMMAND OPERATION CODE (LIO's spc_parse_cdb returns
	// TCM_UNSUPPORTED_SCSI_OPCODE) and REPORT SUPPORTED OPERATION CODES
	// does not list them. Set it when several gateways export the disk:
	// their reservations would not be shared.
	NoReservations bool
	// NoExtendedCopy turns the copy manager off, as LIO's emulate_3pc=0:
	// EXTENDED COPY and RECEIVE COPY RESULTS fail with INVALID COMMAND
	// OPERATION CODE, the standard INQUIRY data clears 3PC, and copies
	// through other LUs do not find this one. By default copies run
	// between LUs of the session's target, found by their NAA designators.
	NoExtendedCopy bool
	// AtomicTransferBlocks is the MAXIMUM ATOMIC TRANSFER LENGTH of the
	// block limits page (at most MaxTransferBlocks and 65535); 0, the
	// default, leaves WRITE ATOMIC(16) out (INVALID COMMAND OPERATION
	// CODE, the atomic fields 0). A WRITE ATOMIC is one disk write under
	// an exclusive range lock: atomic against every other command of the
	// LU; atomic across a power loss only if the disk writes that many
	// blocks atomically, so set it for such disks.
	AtomicTransferBlocks uint32
	// AtomicAlignment and AtomicGranularity are the ATOMIC ALIGNMENT and
	// ATOMIC TRANSFER LENGTH GRANULARITY in logical blocks; 0 means one
	// physical block (1 << PhysicalBlockExp).
	AtomicAlignment, AtomicGranularity uint32
}

// LU is a logical unit: SBC-3 semantics over a backstore.Disk. Create it
// with NewLU and map it into a Target. All methods are safe for concurrent
// use; commands reach it through Session.Execute.
type LU struct {
	disk   backstore.Disk
	discrd backstore.Discarder // nil when the disk cannot deallocate
	// viewer is the disk's memory view for zero-copy reads: nil unless it
	// is a backstore.Viewer that never waits (a wrapper adding waits to
	// a RAM disk serves through its ReadAt).
	viewer backstore.Viewer
	// async is the disk when it starts I/O without waiting (Session.Start).
	async  backstore.AsyncDisk
	zeroer backstore.ZeroWriter
	health backstore.HealthReporter
	bs     int
	shift  uint

	blocks atomic.Uint64 // capacity in logical blocks
	mode   atomic.Uint32 // current mode parameters (mode* bits)

	// Identity, fixed at creation.
	vendor, product, rev [32]byte // space padded, lengths 8/16/4
	serial               string
	naa                  []byte
	eui64                [8]byte
	cfg                  LUConfig

	cmds *commandTable

	mu sync.Mutex
	// targets are the SCSI targets the LU is mapped in: one per
	// transport that exports it (an iSCSI target, an SRP target port), as
	// LIO maps one se_device into several fabrics' TPGs. Reservations,
	// range locks, mode pages and unit attentions are the LU's, so every
	// transport sees the same ones.
	targets map[*Target]bool
	itls    map[*Session]*itl

	tasks  taskSet
	ranges rangeLocks
	pr     prState
	bufs   scratchPool

	errs luErrors // completions other than GOOD (ErrorStats)
}

// Current mode parameter bits.
const (
	modeWCE    = 1 << iota // caching page: write cache enabled
	modeDSense             // control page: descriptor format sense data
	modeSWP                // control page: software write protect
	modeDExcpt             // informational exceptions page: disabled
)

// NewLU makes a logical unit on disk. The LU uses the disk's optional
// capabilities: Discarder (UNMAP, WRITE SAME with UNMAP, thin provisioning
// reported with LBPME and LBPRZ), ZeroWriter (WRITE SAME of zeroes) and
// HealthReporter (LOG SENSE temperature and informational exceptions). The
// caller keeps ownership of the disk and closes it after the LU is unmapped.
func NewLU(disk backstore.Disk, cfg LUConfig) (*LU, error) {
	if disk == nil {
		return nil, ErrNilDisk
	}
	bs := disk.BlockSize()
	if bs < 512 || bs > 65536 || bs&(bs-1) != 0 || disk.Size()%int64(bs) != 0 || disk.Size() <= 0 {
		return nil, fmt.Errorf("%w: block size %d, size %d", ErrBlockSize, bs, disk.Size())
	}
	lu := &LU{disk: disk, bs: bs, cfg: cfg, itls: make(map[*Session]*itl)}
	for s := bs; s > 1; s >>= 1 {
		lu.shift++
	}
	if d, ok := disk.(backstore.Discarder); ok {
		lu.discrd = d
	}
	if z, ok := disk.(backstore.ZeroWriter); ok {
		lu.zeroer = z
	}
	if h, ok := disk.(backstore.HealthReporter); ok {
		lu.health = h
	}
	for _, f := range []struct {
		dst *[32]byte
		s   string
		def string
		n   int
	}{{&lu.vendor, cfg.Vendor, DefaultVendor, 8}, {&lu.product, cfg.Product, DefaultProduct, 16}, {&lu.rev, cfg.Revision, DefaultRevision, 4}} {
		s := f.s
		if s == "" {
			s = f.def
		}
		if len(s) > f.n || !printable(s) {
			return nil, fmt.Errorf("%w: %q (at most %d printable ASCII characters)", ErrIdentity, s, f.n)
		}
		for i := range f.dst {
			f.dst[i] = ' '
		}
		copy(f.dst[:], s)
	}
	lu.serial = cfg.Serial
	if lu.serial == "" {
		h := fnv.New64a()
		fmt.Fprintf(h, "%s/%d/%d", cfg.Name, disk.Size(), bs)
		lu.serial = fmt.Sprintf("%016x", h.Sum64())
	}
	if len(lu.serial) > 64 || !printable(lu.serial) {
		return nil, fmt.Errorf("%w: serial %q (at most 64 printable ASCII characters)", ErrIdentity, lu.serial)
	}
	switch len(cfg.NAA) {
	case 0:
		// NAA 3h: locally assigned, 60 bits of FNV-1a over the serial.
		h := fnv.New64a()
		h.Write([]byte("rdisk-lu/" + cfg.Name + "/" + lu.serial))
		v := h.Sum64()&0x0fffffffffffffff | 0x3000000000000000
		lu.naa = []byte{byte(v >> 56), byte(v >> 48), byte(v >> 40), byte(v >> 32), byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}
	case 8, 16:
		lu.naa = append([]byte(nil), cfg.NAA...)
	default:
		return nil, fmt.Errorf("%w: NAA designator of %d bytes (want 8 or 16)", ErrIdentity, len(cfg.NAA))
	}
	lu.eui64 = cfg.EUI64
	if lu.cfg.MaxCompareAndWriteBlocks == 0 {
		lu.cfg.MaxCompareAndWriteBlocks = 255
	}
	if lu.cfg.PhysicalBlockExp > 15 {
		return nil, fmt.Errorf("%w: physical block exponent %d", ErrBlockSize, lu.cfg.PhysicalBlockExp)
	}
	if n := lu.cfg.AtomicTransferBlocks; n != 0 {
		a, g := lu.cfg.AtomicAlignment, lu.cfg.AtomicGranularity
		if a == 0 {
			a = 1 << lu.cfg.PhysicalBlockExp
		}
		if g == 0 {
			g = 1 << lu.cfg.PhysicalBlockExp
		}
		if a&(a-1) != 0 || g&(g-1) != 0 || a > n || g > n {
			return nil, fmt.Errorf("%w: atomic transfer length %d, alignment %d, granularity %d (powers of two up to the length)",
				ErrBlockSize, n, a, g)
		}
	}
	lu.blocks.Store(uint64(disk.Size()) >> lu.shift)
	lu.mode.Store(lu.defaultMode())
	lu.cmds = newCommandTable(lu)
	if v, ok := disk.(backstore.Viewer); ok && backstore.TraitsOf(disk).Waits == backstore.WaitsNever {
		lu.viewer = v
	}
	lu.async, _ = disk.(backstore.AsyncDisk)
	lu.tasks.init()
	lu.ranges.init()
	lu.tasks.ranges = &lu.ranges
	lu.bufs.init()
	return lu, nil
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

func (lu *LU) defaultMode() uint32 {
	if lu.cfg.WriteThrough {
		return 0
	}
	return modeWCE
}

// BlockSize returns the logical block size in bytes.
func (lu *LU) BlockSize() int { return lu.bs }

// Blocks returns the capacity in logical blocks.
func (lu *LU) Blocks() uint64 { return lu.blocks.Load() }

// Serial returns the unit serial number.
func (lu *LU) Serial() string { return lu.serial }

// Disk returns the LU's disk.
func (lu *LU) Disk() backstore.Disk { return lu.disk }

// CapacityChanged re-reads the disk size after the disk was resized and,
// when it changed, establishes a CAPACITY DATA HAS CHANGED unit attention
// for every I_T nexus.
func (lu *LU) CapacityChanged() {
	n := uint64(lu.disk.Size()) >> lu.shift
	if lu.blocks.Swap(n) != n {
		lu.establishUA(nil, uaCapacityChanged)
	}
}

func (lu *LU) dsense() bool { return lu.mode.Load()&modeDSense != 0 }

// writeProtected reports whether writes are refused, and with which ASC.
func (lu *LU) writeProtected() (bool, ASC) {
	if lu.cfg.ReadOnly || lu.disk.ReadOnly() {
		return true, ASCWriteProtected
	}
	if lu.mode.Load()&modeSWP != 0 {
		return true, ASCSoftwareWriteProtected
	}
	return false, 0
}

// thin reports whether the LU is thin provisioned (LBPME): the disk can
// deallocate and deallocated blocks read back as zeroes.
func (lu *LU) thin() bool { return lu.discrd != nil }

// itlFor returns the I_T_L nexus state of s on lu, creating it (with a
// POWER ON, RESET unit attention pending) on the first command.
func (lu *LU) itlFor(s *Session) *itl {
	if m := s.itls.Load(); m != nil {
		if it := (*m)[lu]; it != nil {
			return it
		}
	}
	return s.newITL(lu)
}

// String names the LU for logs.
func (lu *LU) String() string {
	return "LU " + lu.serial + " (" + strconv.FormatUint(lu.Blocks(), 10) + "x" + strconv.Itoa(lu.bs) + ")"
}
