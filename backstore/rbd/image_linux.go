//go:build ceph && linux

package rbd

/*
#cgo LDFLAGS: -lrbd -lrados
#include "shim_linux.h"
#include <rbd/features.h>
*/
import "C"

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"runtime/cgo"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/ceph/go-ceph/rados"
	"github.com/rdisk/rdisk/backstore"
	"golang.org/x/sys/unix"
)

// Built reports whether this build can open RBD images.
func Built() bool { return true }

// completers is the number of goroutines that run the Done functions of
// completed I/O when librbd calls back per aio (no eventfd); with the
// eventfd, one reaper runs them and one completer finishes the I/Os that
// complete without librbd (empty ranges).
const completers = 2

// Image is an open RBD image served through librbd's aio API. It
// implements backstore.Disk, VectoredDisk, AsyncDisk, Discarder,
// ZeroWriter, Resizer, Rescanner, SizeWatcher, HealthReporter,
// TraitsReporter and StatsReporter.
type Image struct {
	cfg  Config
	name string
	log  *slog.Logger

	conn  *rados.Conn
	ioctx *rados.IOContext
	img   C.rbd_image_t

	bs                 int
	readOnly           bool
	cacheOn            bool // rbd_cache: FUA needs a flush after the write
	zeroesAfterDiscard bool
	features           uint64

	size atomic.Int64

	// I/O slots: free holds the idle ones; created counts them (under
	// slotMu), at most cfg.MaxInFlight.
	free      chan *slot
	done      chan *slot
	slotMu    sync.Mutex
	slots     []*slot
	active    atomic.Int64 // I/Os started and not finished (Done returned)
	closed    atomic.Bool
	closeOnce sync.Once
	ctlMu     sync.RWMutex // held shared by Resize, Rescan, Health, ClientAddress; Close takes it
	wg        sync.WaitGroup

	// Polled completions (see reaper): librbd queues completed aios on
	// the image and signals evf, an eventfd read through the netpoller;
	// reapArgs and reapRets are C arrays of RDISK_REAP_MAX for
	// rdisk_rbd_reap. Without polled, librbd calls back per aio.
	polled   bool
	evf      *os.File
	evBuf    [8]byte
	batch    backstore.Batch // the reaper's
	reapArgs *C.uintptr_t
	reapRets *C.int64_t
	reapStop atomic.Bool

	// The size watch.
	self        cgo.Handle // *Image, the watch callback's argument
	watchHandle C.uint64_t
	watching    bool
	watchKick   chan struct{}
	watchStop   chan struct{}
	watchFn     atomic.Pointer[func(int64)]

	syncReqs chan *syncReq // idle synchronous requests (a free list: sync.Pool drops items at GC and under -race)

	healthMu   sync.Mutex
	healthAt   time.Time
	healthLast backstore.Health

	st stats
}

// slot is one I/O in flight: its completion's argument (a cgo.Handle to
// the slot), C memory for the iovec array and the mismatch offset, and the
// pins of the caller's buffers (librbd uses them after submit returns).
type slot struct {
	img      *Image
	h        cgo.Handle
	cmem     unsafe.Pointer // iovCap iovecs, then a uint64 mismatch offset
	iovCap   int
	pin      runtime.Pinner
	io       *backstore.AsyncIO
	op       backstore.AsyncOp
	n        int64
	start    time.Duration
	flushFUA bool // after the write succeeds, flush (rbd_cache on)
	ret      int64
	mismatch int64
	cmp      []byte // compare buffer of CompareAndWrite
}

func (s *slot) iov() *C.struct_iovec { return (*C.struct_iovec)(s.cmem) }

// An iovec is two words (base, length): start writes them as uintptrs.
var _ = [1]int{}[unsafe.Sizeof(C.struct_iovec{})-2*unsafe.Sizeof(uintptr(0))]

func (s *slot) mismatchPtr() *C.uint64_t {
	return (*C.uint64_t)(unsafe.Add(s.cmem, uintptr(s.iovCap)*unsafe.Sizeof(C.struct_iovec{})))
}

// ensureIov makes room for n iovecs (C memory; grows only).
func (s *slot) ensureIov(n int) {
	if n <= s.iovCap {
		return
	}
	c := s.iovCap
	for c < n {
		c *= 2
	}
	p := C.realloc(s.cmem, C.size_t(uintptr(c)*unsafe.Sizeof(C.struct_iovec{})+8))
	if p == nil {
		panic("rbd: out of C memory for an iovec array")
	}
	s.cmem, s.iovCap = p, c
}

// syncReq is a pooled synchronous request: Start and wait.
type syncReq struct {
	io  backstore.AsyncIO
	one [1][]byte
	ch  chan struct{}
}

// syncReqsKept is how many idle synchronous requests an image keeps.
const syncReqsKept = 256

func newSyncReq() *syncReq {
	r := &syncReq{ch: make(chan struct{}, 1)}
	r.io.Done = func(*backstore.AsyncIO) { r.ch <- struct{}{} }
	return r
}

// Open connects to the cluster, opens the image and starts serving it.
// The caller closes it. log may be nil (slog.Default).
func Open(cfg Config, log *slog.Logger) (*Image, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if log == nil {
		log = slog.Default()
	}
	im := &Image{cfg: cfg, name: cfg.Name(), log: log.With("rbd", cfg.Name()), bs: cfg.BlockSize, readOnly: cfg.ReadOnly}
	im.st.epoch = time.Now()
	if err := im.connect(); err != nil {
		return nil, err
	}
	if err := im.open(); err != nil {
		im.ioctx.Destroy()
		im.conn.Shutdown()
		return nil, err
	}
	im.free = make(chan *slot, cfg.MaxInFlight)
	im.done = make(chan *slot, cfg.MaxInFlight)
	im.watchKick = make(chan struct{}, 1)
	im.watchStop = make(chan struct{})
	im.syncReqs = make(chan *syncReq, syncReqsKept)
	im.setupEvents()
	n := completers
	if im.polled {
		n = 1
		im.wg.Add(1)
		go im.reaper()
	}
	for range n {
		im.wg.Add(1)
		go im.completer()
	}
	im.self = cgo.NewHandle(im)
	var h C.uint64_t
	if r := C.rdisk_rbd_update_watch(im.img, &h, C.uintptr_t(im.self)); r < 0 {
		im.log.Warn("rbd: no watch on the image header: outside resizes are not noticed", "err", errorOf("rbd_update_watch", im.name, -1, 0, int64(r)))
	} else {
		im.watchHandle, im.watching = h, true
	}
	im.wg.Add(1)
	go im.watcher(im.size.Load())
	im.kick() // a resize between reading the size and setting the watch

	im.log.Info("rbd: image open", "size", im.size.Load(), "block_size", im.bs, "read_only", im.readOnly,
		"lock", string(cfg.Lock), "features", featureNames(im.features), "rbd_cache", im.cacheOn,
		"zeroes_after_discard", im.zeroesAfterDiscard, "completions", map[bool]string{true: "eventfd", false: "callback"}[im.polled])
	return im, nil
}

// connect makes the rados connection and the pool's I/O context.
func (im *Image) connect() error {
	cfg := im.cfg
	conn, err := rados.NewConnWithUser(cfg.ID)
	if err != nil {
		return fmt.Errorf("rbd %s: creating the rados client for client.%s: %w", im.name, cfg.ID, err)
	}
	if cfg.ConfFile != "" {
		if err := conn.ReadConfigFile(cfg.ConfFile); err != nil {
			conn.Shutdown()
			return fmt.Errorf("rbd %s: reading ceph conf %s: %w", im.name, cfg.ConfFile, err)
		}
	} else if err := conn.ReadDefaultConfigFile(); err != nil && cfg.MonHost == "" {
		conn.Shutdown()
		return fmt.Errorf("rbd %s: reading the default ceph conf ($CEPH_CONF, /etc/ceph/ceph.conf): %w (give conf_file or mon_host)", im.name, err)
	}
	secs := strconv.Itoa(int((cfg.OpTimeout + time.Second - 1) / time.Second))
	opts := [][2]string{
		{"rados_osd_op_timeout", secs},
		{"rados_mon_op_timeout", secs},
		{"client_mount_timeout", secs},
	}
	if cfg.Keyring != "" {
		opts = append(opts, [2]string{"keyring", cfg.Keyring})
	}
	if cfg.MonHost != "" {
		opts = append(opts, [2]string{"mon_host", cfg.MonHost})
	}
	for _, o := range opts {
		if err := conn.SetConfigOption(o[0], o[1]); err != nil {
			conn.Shutdown()
			return fmt.Errorf("rbd %s: setting %s = %s: %w", im.name, o[0], o[1], err)
		}
	}
	if err := conn.Connect(); err != nil {
		conn.Shutdown()
		return fmt.Errorf("rbd %s: connecting to the cluster as client.%s: %w", im.name, cfg.ID, err)
	}
	ioctx, err := conn.OpenIOContext(cfg.Pool)
	if err != nil {
		conn.Shutdown()
		return fmt.Errorf("rbd %s: opening pool %s: %w", im.name, cfg.Pool, err)
	}
	if cfg.Namespace != "" {
		ioctx.SetNamespace(cfg.Namespace)
	}
	// Writes to a full pool fail at once (ENOSPC, EDQUOT for a quota)
	// instead of waiting, paused in the client, until space is freed or
	// the op timeout: the hosts get Capacity Exceeded, not a hung path.
	// librbd's I/O contexts are copies of this one and keep the flag.
	if err := ioctx.SetPoolFullTry(); err != nil {
		ioctx.Destroy()
		conn.Shutdown()
		return fmt.Errorf("rbd %s: rados_set_osdmap_full_try: %w", im.name, err)
	}
	im.conn, im.ioctx = conn, ioctx
	return nil
}

// open opens the image, applies the lock mode and reads what the I/O
// paths need.
func (im *Image) open() error {
	cname := C.CString(im.cfg.Image)
	defer C.free(unsafe.Pointer(cname))
	ioctx := C.rados_ioctx_t(im.ioctx.Pointer())
	var r C.int
	if im.readOnly {
		r = C.rbd_open_read_only(ioctx, cname, &im.img, nil)
	} else {
		r = C.rbd_open(ioctx, cname, &im.img, nil)
	}
	if r < 0 {
		return errorOf("rbd_open", im.name, -1, 0, int64(r))
	}
	fail := func(err error) error {
		C.rbd_close(im.img)
		return err
	}
	var feat C.uint64_t
	if r := C.rbd_get_features(im.img, &feat); r < 0 {
		return fail(errorOf("rbd_get_features", im.name, -1, 0, int64(r)))
	}
	im.features = uint64(feat)
	if err := im.applyLock(); err != nil {
		return fail(err)
	}
	var sz C.uint64_t
	if r := C.rbd_get_size(im.img, &sz); r < 0 {
		return fail(errorOf("rbd_get_size", im.name, -1, 0, int64(r)))
	}
	if int64(sz) < int64(im.bs) || int64(sz) < 0 {
		return fail(fmt.Errorf("rbd %s: the image's size %d is smaller than a block (%d)", im.name, uint64(sz), im.bs))
	}
	im.size.Store(int64(sz) &^ int64(im.bs-1))
	if int64(sz)%int64(im.bs) != 0 {
		im.log.Warn("rbd: the image size is not a multiple of the block size; the tail is not exported", "size", uint64(sz), "block_size", im.bs)
	}
	im.cacheOn = im.boolOption("rbd_cache", true)
	im.zeroesAfterDiscard = !im.boolOption("rbd_skip_partial_discard", true)
	return nil
}

// boolOption reads a librbd boolean option as the image sees it: the
// image's metadata override (conf_NAME) first, then the client's config.
func (im *Image) boolOption(name string, def bool) bool {
	v, ok := im.metadata("conf_" + name)
	if !ok {
		var err error
		if v, err = im.conn.GetConfigOption(name); err != nil {
			return def
		}
	}
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "true", "1", "yes", "on":
		return true
	case "false", "0", "no", "off":
		return false
	}
	return def
}

// metadata returns the image metadata value of key.
func (im *Image) metadata(key string) (string, bool) {
	ck := C.CString(key)
	defer C.free(unsafe.Pointer(ck))
	var buf [256]C.char
	n := C.size_t(len(buf))
	if r := C.rbd_metadata_get(im.img, ck, &buf[0], &n); r < 0 {
		return "", false
	}
	return C.GoString(&buf[0]), true
}

// applyLock enforces the lock mode (see LockMode).
func (im *Image) applyLock() error {
	hasLock := im.features&C.RBD_FEATURE_EXCLUSIVE_LOCK != 0
	switch im.cfg.Lock {
	case LockShared:
		if hasLock && !im.readOnly {
			dep := []string{}
			for _, f := range [...]struct {
				bit  uint64
				name string
			}{{C.RBD_FEATURE_JOURNALING, "journaling"}, {C.RBD_FEATURE_FAST_DIFF, "fast-diff"}, {C.RBD_FEATURE_OBJECT_MAP, "object-map"}} {
				if im.features&f.bit != 0 {
					dep = append(dep, f.name)
				}
			}
			dep = append(dep, "exclusive-lock")
			return fmt.Errorf("rbd %s: lock mode shared (several gateways writing at once): %w; disable it (rbd feature disable %s %s) or choose lock exclusive or auto",
				im.name, ErrLockFeature, im.name, strings.Join(dep, " "))
		}
		return nil
	case LockAuto:
		return nil
	}
	// LockExclusive.
	if !hasLock {
		return fmt.Errorf("rbd %s: lock mode exclusive needs the exclusive-lock feature (rbd feature enable %s exclusive-lock)", im.name, im.name)
	}
	r := C.rbd_lock_acquire(im.img, C.RBD_LOCK_MODE_EXCLUSIVE)
	if r == 0 {
		return nil
	}
	if r != -C.EROFS && r != -C.EBUSY && r != -C.EAGAIN {
		return errorOf("rbd_lock_acquire", im.name, -1, 0, int64(r))
	}
	// Another client holds it: take it over, fencing that client.
	owners, err := im.lockOwners()
	if err != nil {
		return err
	}
	for _, o := range owners {
		co := C.CString(o)
		r := C.rbd_lock_break(im.img, C.RBD_LOCK_MODE_EXCLUSIVE, co)
		C.free(unsafe.Pointer(co))
		if r < 0 && r != -C.ENOENT {
			return errorOf("rbd_lock_break of "+o, im.name, -1, 0, int64(r))
		}
		im.log.Warn("rbd: took the exclusive lock over: the previous owner is blocklisted", "owner", o)
	}
	if r := C.rbd_lock_acquire(im.img, C.RBD_LOCK_MODE_EXCLUSIVE); r < 0 {
		return errorOf("rbd_lock_acquire after breaking the lock", im.name, -1, 0, int64(r))
	}
	return nil
}

// lockOwners lists the exclusive lock's owners.
func (im *Image) lockOwners() ([]string, error) {
	var mode C.rbd_lock_mode_t
	owners := make([]*C.char, 8)
	n := C.size_t(len(owners))
	r := C.rbd_lock_get_owners(im.img, &mode, &owners[0], &n)
	if r == -C.ENOENT {
		return nil, nil
	}
	if r < 0 {
		return nil, errorOf("rbd_lock_get_owners", im.name, -1, 0, int64(r))
	}
	out := make([]string, 0, n)
	for i := range int(n) {
		out = append(out, C.GoString(owners[i]))
	}
	C.rbd_lock_get_owners_cleanup(&owners[0], n)
	return out, nil
}

func featureNames(f uint64) string {
	names := []string{}
	for _, x := range [...]struct {
		bit  uint64
		name string
	}{
		{C.RBD_FEATURE_LAYERING, "layering"}, {C.RBD_FEATURE_STRIPINGV2, "striping"},
		{C.RBD_FEATURE_EXCLUSIVE_LOCK, "exclusive-lock"}, {C.RBD_FEATURE_OBJECT_MAP, "object-map"},
		{C.RBD_FEATURE_FAST_DIFF, "fast-diff"}, {C.RBD_FEATURE_DEEP_FLATTEN, "deep-flatten"},
		{C.RBD_FEATURE_JOURNALING, "journaling"}, {C.RBD_FEATURE_DATA_POOL, "data-pool"},
	} {
		if f&x.bit != 0 {
			names = append(names, x.name)
		}
	}
	return strings.Join(names, ",")
}

// Name returns "POOL/IMAGE" (or "POOL/NAMESPACE/IMAGE").
func (im *Image) Name() string { return im.name }

// Config returns the configuration the image was opened with, defaults
// filled in.
func (im *Image) Config() Config { return im.cfg }

// BlockSize implements backstore.Disk.
func (im *Image) BlockSize() int { return im.bs }

// Size implements backstore.Disk: the image's size rounded down to the
// block size, as last read (Open, Resize, Rescan, the header watch).
func (im *Image) Size() int64 { return im.size.Load() }

// ReadOnly implements backstore.Disk.
func (im *Image) ReadOnly() bool { return im.readOnly }

// Traits implements backstore.TraitsReporter: every call waits for the
// network; discarded ranges read back zeroes unless librbd skips partial
// discards (rbd_skip_partial_discard, true by default).
func (im *Image) Traits() backstore.Traits {
	return backstore.Traits{Waits: backstore.WaitsAlways, ZeroesAfterDiscard: im.zeroesAfterDiscard}
}

// Stats implements backstore.StatsReporter.
func (im *Image) Stats() backstore.Stats { return im.st.snapshot() }

// ClientAddress returns this client's address as the OSDs see it (what
// `ceph osd blocklist add` takes to fence this gateway).
func (im *Image) ClientAddress() (string, error) {
	im.ctlMu.RLock()
	defer im.ctlMu.RUnlock()
	if im.closed.Load() {
		return "", fmt.Errorf("rbd %s: %w", im.name, backstore.ErrClosed)
	}
	a, err := im.conn.GetAddrs()
	if err != nil {
		return "", fmt.Errorf("rbd %s: rados_getaddrs: %w", im.name, err)
	}
	return a, nil
}

// Start implements backstore.AsyncDisk: the operation is submitted to
// librbd and Done runs on one of the image's completion goroutines. With
// Config.MaxInFlight I/Os already in flight, Start waits for one to end.
func (im *Image) Start(io *backstore.AsyncIO) error {
	if io == nil || io.Done == nil {
		return errors.New("rbd: Start without an AsyncIO or its Done")
	}
	switch io.Op {
	case backstore.AsyncRead, backstore.AsyncWrite, backstore.AsyncFlush, backstore.AsyncDiscard, backstore.AsyncWriteZeroes:
	default:
		return fmt.Errorf("rbd %s: Start: unknown operation %v: %w", im.name, io.Op, backstore.ErrUnsupported)
	}
	return im.start(io, nil)
}

// start checks and submits io; cmp is CompareAndWrite's compare buffer.
func (im *Image) start(io *backstore.AsyncIO, cmp []byte) error {
	op := io.Op
	var off, n int64
	switch op {
	case backstore.AsyncRead, backstore.AsyncWrite, opCompareAndWrite:
		off, n = io.Off, vecLen(io.Bufs)
		if n < 0 {
			n = -1
		}
	case backstore.AsyncDiscard, backstore.AsyncWriteZeroes:
		off, n = io.Off, io.Len
	}
	if op != backstore.AsyncFlush {
		if err := checkRange(backstoreOp(op), off, n, im.size.Load(), im.bs); err != nil {
			im.st.rejected.Add(1)
			return err
		}
	}
	if im.readOnly && op != backstore.AsyncRead && op != backstore.AsyncFlush {
		im.st.rejected.Add(1)
		return fmt.Errorf("rbd %s: %v: %w", im.name, backstoreOp(op), backstore.ErrReadOnly)
	}
	im.active.Add(1)
	if im.closed.Load() {
		im.active.Add(-1)
		im.st.rejected.Add(1)
		return fmt.Errorf("rbd %s: %v: %w", im.name, backstoreOp(op), backstore.ErrClosed)
	}
	s := im.getSlot()
	s.io, s.op, s.n, s.cmp = io, op, n, cmp
	s.flushFUA = im.cacheOn && io.Flags&backstore.FUA != 0 && (op == backstore.AsyncWrite || op == backstore.AsyncWriteZeroes)
	if op == backstore.AsyncWrite && io.Flags&backstore.FUA != 0 {
		im.st.fua.Add(1)
	}
	im.st.inFlight.Add(1)
	s.start = im.st.now()
	if n == 0 && op != backstore.AsyncFlush {
		// Nothing to do; complete on a completer, never inside Start.
		s.ret = 0
		im.done <- s
		return nil
	}
	iovcnt := 0
	if op == backstore.AsyncRead || op == backstore.AsyncWrite || op == opCompareAndWrite {
		s.ensureIov(len(io.Bufs))
		// The iovecs are written as words, not through iov_base (an
		// unsafe.Pointer field): a pointer store has a write barrier,
		// which during a GC cycle shades the old value too, the address
		// of an earlier I/O's buffer, maybe freed since (a closed
		// connection's), and the runtime dies with "found bad pointer in
		// Go heap". C memory is no place for pointers the GC sees.
		iov := unsafe.Slice((*[2]uintptr)(s.cmem), s.iovCap)
		for _, b := range io.Bufs {
			if len(b) == 0 {
				continue
			}
			p := unsafe.SliceData(b)
			s.pin.Pin(p)
			iov[iovcnt] = [2]uintptr{uintptr(unsafe.Pointer(p)), uintptr(len(b))}
			iovcnt++
		}
	}
	var cmpPtr *C.char
	if op == opCompareAndWrite {
		p := unsafe.SliceData(cmp)
		s.pin.Pin(p)
		cmpPtr = (*C.char)(unsafe.Pointer(p))
	}
	polled := im.cPolled()
	if op == opCompareAndWrite {
		// Pacific's rbd_aio_compare_and_write never signals the image's
		// eventfd: its completion calls back (to the completer).
		polled = 0
	}
	r := C.rdisk_rbd_submit(im.img, cOp(op), C.uintptr_t(s.h), s.iov(), C.int(iovcnt),
		C.uint64_t(off), C.uint64_t(n), cmpPtr, s.mismatchPtr(), polled)
	if r < 0 {
		err := errorOf("submitting "+backstoreOp(op).String(), im.name, off, n, int64(r))
		im.st.counters(op).done(n, im.st.now()-s.start, true)
		im.st.inFlight.Add(-1)
		im.putSlot(s)
		im.active.Add(-1)
		return err
	}
	return nil
}

func cOp(op backstore.AsyncOp) C.int {
	switch op {
	case backstore.AsyncRead:
		return C.RDISK_OP_READ
	case backstore.AsyncWrite:
		return C.RDISK_OP_WRITE
	case backstore.AsyncFlush:
		return C.RDISK_OP_FLUSH
	case backstore.AsyncDiscard:
		return C.RDISK_OP_DISCARD
	case backstore.AsyncWriteZeroes:
		return C.RDISK_OP_ZEROES
	}
	return C.RDISK_OP_CAW
}

// getSlot returns an idle slot, making one while fewer than MaxInFlight
// exist, else waiting for one.
func (im *Image) getSlot() *slot {
	select {
	case s := <-im.free:
		return s
	default:
	}
	im.slotMu.Lock()
	if len(im.slots) < im.cfg.MaxInFlight {
		s := &slot{img: im, iovCap: 4}
		s.cmem = C.malloc(C.size_t(uintptr(s.iovCap)*unsafe.Sizeof(C.struct_iovec{}) + 8))
		if s.cmem == nil {
			panic("rbd: out of C memory for an I/O slot")
		}
		s.h = cgo.NewHandle(s)
		im.slots = append(im.slots, s)
		im.slotMu.Unlock()
		return s
	}
	im.slotMu.Unlock()
	return <-im.free
}

func (im *Image) putSlot(s *slot) {
	s.pin.Unpin()
	s.io, s.cmp = nil, nil
	im.free <- s
}

//export rdiskRBDDone
func rdiskRBDDone(arg C.uintptr_t, r C.int64_t) {
	s := cgo.Handle(arg).Value().(*slot)
	s.ret = int64(r)
	s.mismatch = int64(*s.mismatchPtr())
	s.img.done <- s
}

func (im *Image) cPolled() C.int {
	if im.polled {
		return 1
	}
	return 0
}

// setupEvents asks librbd to queue the image's completions and signal an
// eventfd (rbd_set_image_notification) instead of calling back per aio.
// A callback is a librbd thread entering Go: it needs a P, which it
// waits for while the queue goroutines hold them, and that wait holds up
// librbd's completion thread. On failure (or with
// RDISK_RBD_COMPLETIONS=callback in the environment) the image keeps the
// callbacks.
func (im *Image) setupEvents() {
	if os.Getenv("RDISK_RBD_COMPLETIONS") == "callback" {
		return
	}
	fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		im.log.Warn("rbd: no eventfd for completions: librbd calls back per I/O", "err", err)
		return
	}
	if r := C.rbd_set_image_notification(im.img, C.int(fd), C.EVENT_TYPE_EVENTFD); r < 0 {
		unix.Close(fd)
		im.log.Warn("rbd: no completion notification: librbd calls back per I/O", "err", errorOf("rbd_set_image_notification", im.name, -1, 0, int64(r)))
		return
	}
	im.evf = os.NewFile(uintptr(fd), "rbd-completions")
	im.reapArgs = (*C.uintptr_t)(C.malloc(C.size_t(C.RDISK_REAP_MAX * unsafe.Sizeof(C.uintptr_t(0)))))
	im.reapRets = (*C.int64_t)(C.malloc(C.size_t(C.RDISK_REAP_MAX * unsafe.Sizeof(C.int64_t(0)))))
	if im.reapArgs == nil || im.reapRets == nil {
		panic("rbd: out of C memory for the completion arrays")
	}
	im.polled = true
}

// reaper collects the image's completed aios, many per cgo call, each
// time the eventfd is signalled, and finishes them (their Done functions
// run here). Close stops it once nothing is in flight.
func (im *Image) reaper() {
	defer im.wg.Done()
	args := unsafe.Slice((*uintptr)(unsafe.Pointer(im.reapArgs)), C.RDISK_REAP_MAX)
	rets := unsafe.Slice((*int64)(unsafe.Pointer(im.reapRets)), C.RDISK_REAP_MAX)
	for {
		// Read (reset) the counter before collecting: a completion queued
		// after the last collection signals again.
		if _, err := im.evf.Read(im.evBuf[:]); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			im.log.Error("rbd: reading the completion eventfd", "err", err)
			return
		}
		for {
			k := int(C.rdisk_rbd_reap(im.img, im.reapArgs, im.reapRets, C.RDISK_REAP_MAX))
			if k <= 0 {
				break
			}
			// Several at once: the transports may send their responses
			// in one write after the last (backstore.Batch).
			var b *backstore.Batch
			if k > 1 {
				b = &im.batch
			}
			for i := range k {
				s := cgo.Handle(args[i]).Value().(*slot)
				s.ret = rets[i]
				s.mismatch = int64(*s.mismatchPtr())
				im.finish(s, b)
			}
			if b != nil {
				b.Run()
			}
			if k < C.RDISK_REAP_MAX {
				break
			}
		}
		if im.reapStop.Load() {
			return
		}
	}
}

// stopReaper ends the reaper (nothing is in flight).
func (im *Image) stopReaper() {
	im.reapStop.Store(true)
	var one [8]byte
	one[0] = 1 // native byte order: little-endian amd64, arm64; any non-zero value wakes
	if _, err := im.evf.Write(one[:]); err != nil {
		im.log.Warn("rbd: waking the completion reaper", "err", err)
	}
}

// completer finishes completed I/O and runs the Done functions.
func (im *Image) completer() {
	defer im.wg.Done()
	for s := range im.done {
		im.finish(s, nil)
	}
}

// finish ends s's I/O and calls its Done; b is the reaper's batch when it
// completes several.
func (im *Image) finish(s *slot, b *backstore.Batch) {
	io := s.io
	if s.flushFUA && s.ret >= 0 {
		// The write is in librbd's cache: flush it before reporting a
		// FUA write done.
		s.flushFUA = false
		r := C.rdisk_rbd_submit(im.img, C.RDISK_OP_FLUSH, C.uintptr_t(s.h), s.iov(), 0, 0, 0, nil, s.mismatchPtr(), im.cPolled())
		if r >= 0 {
			return
		}
		s.ret = int64(r)
	}
	var err error
	switch {
	case s.ret == -int64(syscall.EILSEQ) && s.op == opCompareAndWrite:
		err = &MiscompareError{Image: im.name, Off: s.mismatch}
	case s.ret < 0:
		err = errorOf(backstoreOp(s.op).String(), im.name, ioOff(io), s.n, s.ret)
	case s.op == backstore.AsyncRead && s.ret != s.n:
		err = &Error{Step: "read (short: " + strconv.FormatInt(s.ret, 10) + " bytes)", Image: im.name, Off: io.Off, Len: s.n, Errno: syscall.EIO}
	}
	failed := err != nil && !(s.op == opCompareAndWrite && s.ret == -int64(syscall.EILSEQ))
	im.st.counters(s.op).done(s.n, im.st.now()-s.start, failed)
	im.st.inFlight.Add(-1)
	im.putSlot(s)
	io.Err, io.Batch = err, b
	io.Done(io)
	im.active.Add(-1)
}

func ioOff(io *backstore.AsyncIO) int64 {
	if io.Op == backstore.AsyncFlush {
		return -1
	}
	return io.Off
}

// MiscompareError is the error of a CompareAndWrite whose compare buffer
// differs from the data on the image: nothing was written.
type MiscompareError struct {
	Image string
	Off   int64 // librbd's mismatch offset (see CompareAndWrite)
}

// Error describes the miscompare.
func (e *MiscompareError) Error() string {
	return "rbd " + e.Image + ": compare and write: data differs at offset " + strconv.FormatInt(e.Off, 10)
}

// Is matches ErrMiscompare.
func (e *MiscompareError) Is(target error) bool { return target == ErrMiscompare }

// do runs io synchronously through Start.
func (im *Image) do(op backstore.AsyncOp, bufs [][]byte, p []byte, off, n int64, flags backstore.WriteFlags, cmp []byte) (int64, error) {
	var r *syncReq
	select {
	case r = <-im.syncReqs:
	default:
		r = newSyncReq()
	}
	r.io.Op, r.io.Off, r.io.Len, r.io.Flags, r.io.Err = op, off, n, flags, nil
	if bufs != nil {
		r.io.Bufs = bufs
	} else {
		r.one[0] = p
		r.io.Bufs = r.one[:]
	}
	err := im.start(&r.io, cmp)
	if err == nil {
		<-r.ch
		err = r.io.Err
	}
	var miss int64 = -1
	if me, ok := err.(*MiscompareError); ok {
		miss = me.Off
	}
	r.one[0], r.io.Bufs, r.io.Err = nil, nil, nil
	select {
	case im.syncReqs <- r:
	default:
	}
	return miss, err
}

// ReadAt implements backstore.Disk.
func (im *Image) ReadAt(p []byte, off int64) error {
	_, err := im.do(backstore.AsyncRead, nil, p, off, 0, 0, nil)
	return err
}

// WriteAt implements backstore.Disk. With FUA the write is durable on
// return (with rbd_cache off every acknowledged write is on the OSDs;
// with it on, a flush follows).
func (im *Image) WriteAt(p []byte, off int64, flags backstore.WriteFlags) error {
	_, err := im.do(backstore.AsyncWrite, nil, p, off, 0, flags, nil)
	return err
}

// ReadvAt implements backstore.VectoredDisk.
func (im *Image) ReadvAt(bufs [][]byte, off int64) error {
	_, err := im.do(backstore.AsyncRead, nonNil(bufs), nil, off, 0, 0, nil)
	return err
}

// WritevAt implements backstore.VectoredDisk.
func (im *Image) WritevAt(bufs [][]byte, off int64, flags backstore.WriteFlags) error {
	_, err := im.do(backstore.AsyncWrite, nonNil(bufs), nil, off, 0, flags, nil)
	return err
}

func nonNil(b [][]byte) [][]byte {
	if b == nil {
		return [][]byte{}
	}
	return b
}

// Flush implements backstore.Disk (rbd_aio_flush).
func (im *Image) Flush() error {
	_, err := im.do(backstore.AsyncFlush, nil, nil, 0, 0, 0, nil)
	return err
}

// Discard implements backstore.Discarder (rbd_aio_discard).
func (im *Image) Discard(off, length int64) error {
	_, err := im.do(backstore.AsyncDiscard, nil, nil, off, length, 0, nil)
	return err
}

// WriteZeroes implements backstore.ZeroWriter (rbd_aio_write_zeroes).
func (im *Image) WriteZeroes(off, length int64, flags backstore.WriteFlags) error {
	_, err := im.do(backstore.AsyncWriteZeroes, nil, nil, off, length, flags, nil)
	return err
}

// CompareAndWrite writes data at off only if the image holds cmp there
// (rbd_aio_compare_and_write, atomic on the OSD; SCSI COMPARE AND WRITE,
// NVMe Compare+Write fused). cmp and data have the same block-aligned
// length. Pacific's librbd (16.x) takes at most one 512-byte sector (a
// longer range fails with EINVAL; CompareAndWriteMax says so); later
// releases take more. On a mismatch it returns an error matching
// ErrMiscompare and mismatch, librbd's offset of the first differing
// byte; otherwise mismatch is -1.
func (im *Image) CompareAndWrite(cmp, data []byte, off int64) (mismatch int64, err error) {
	if len(cmp) != len(data) {
		return -1, fmt.Errorf("rbd %s: compare and write: compare buffer of %d bytes, data of %d", im.name, len(cmp), len(data))
	}
	if len(data) == 0 {
		return -1, nil
	}
	return im.do(opCompareAndWrite, nil, data, off, 0, 0, cmp)
}

// CompareAndWriteMax is the longest range CompareAndWrite takes with this
// librbd (Pacific: one 512-byte sector).
func (im *Image) CompareAndWriteMax() int { return 512 }

// Resize implements backstore.Resizer: rbd_resize, growing only.
func (im *Image) Resize(size int64) error {
	old := im.size.Load()
	if size <= 0 || size%int64(im.bs) != 0 {
		return fmt.Errorf("resizing rbd %s from %d to %d bytes: the size is not a positive multiple of the block size %d", im.name, old, size, im.bs)
	}
	if im.readOnly {
		return fmt.Errorf("resizing rbd %s: %w", im.name, backstore.ErrReadOnly)
	}
	im.ctlMu.RLock()
	defer im.ctlMu.RUnlock()
	if im.closed.Load() {
		return fmt.Errorf("resizing rbd %s: %w", im.name, backstore.ErrClosed)
	}
	old = im.size.Load()
	if size < old {
		return fmt.Errorf("resizing rbd %s from %d to %d bytes: shrinking would drop the data past the new end: %w", im.name, old, size, backstore.ErrUnsupported)
	}
	if size == old {
		return nil
	}
	if r := C.rbd_resize(im.img, C.uint64_t(size)); r < 0 {
		return fmt.Errorf("resizing rbd %s from %d to %d bytes: %w", im.name, old, size, errorOf("rbd_resize", im.name, -1, 0, int64(r)))
	}
	im.refreshSize()
	return nil
}

// Rescan implements backstore.Rescanner: re-reads the size (rbd_get_size).
func (im *Image) Rescan() error {
	im.ctlMu.RLock()
	defer im.ctlMu.RUnlock()
	if im.closed.Load() {
		return fmt.Errorf("rescanning rbd %s: %w", im.name, backstore.ErrClosed)
	}
	_, err := im.refreshSize()
	return err
}

// refreshSize reads the size and stores it; when it changed it wakes the
// watcher, which tells the watch function. It returns whether it changed.
func (im *Image) refreshSize() (bool, error) {
	var sz C.uint64_t
	if r := C.rbd_get_size(im.img, &sz); r < 0 {
		return false, errorOf("rbd_get_size", im.name, -1, 0, int64(r))
	}
	n := int64(sz) &^ int64(im.bs-1)
	if n < 0 {
		return false, fmt.Errorf("rbd %s: size %d out of range", im.name, uint64(sz))
	}
	if im.size.Swap(n) == n {
		return false, nil
	}
	im.log.Info("rbd: the image size changed", "size", n)
	im.kick()
	return true, nil
}

func (im *Image) kick() {
	select {
	case im.watchKick <- struct{}{}:
	default:
	}
}

// WatchSize implements backstore.SizeWatcher: the header watch
// (rbd_update_watch) calls changed after the image was resized, here or
// elsewhere (`rbd resize`).
func (im *Image) WatchSize(changed func(size int64)) {
	if changed == nil {
		im.watchFn.Store(nil)
		return
	}
	im.watchFn.Store(&changed)
}

//export rdiskRBDWatch
func rdiskRBDWatch(arg C.uintptr_t) {
	cgo.Handle(arg).Value().(*Image).kick()
}

// watcher re-reads the size when the header watch fires (librbd calls the
// callback on its own thread, where calling back into librbd is not
// safe).
func (im *Image) watcher(told int64) {
	defer im.wg.Done()
	for {
		select {
		case <-im.watchStop:
			return
		case <-im.watchKick:
		}
		if _, err := im.refreshSize(); err != nil {
			im.log.Warn("rbd: reading the size after a header update", "err", err)
			continue
		}
		if n := im.size.Load(); n != told {
			told = n
			if fn := im.watchFn.Load(); fn != nil {
				(*fn)(n)
			}
		}
	}
}

// Close implements backstore.Disk: waits for the I/O in flight (their
// Done functions included, so Close must not be called from a Done),
// then closes the image and the cluster connection.
func (im *Image) Close() error {
	err := fmt.Errorf("closing rbd %s: %w", im.name, backstore.ErrClosed)
	im.closeOnce.Do(func() {
		err = nil
		im.closed.Store(true)
		im.ctlMu.Lock() // the control calls in progress end
		defer im.ctlMu.Unlock()
		for im.active.Load() > 0 {
			time.Sleep(time.Millisecond)
		}
		if im.watching {
			if r := C.rbd_update_unwatch(im.img, im.watchHandle); r < 0 {
				im.log.Warn("rbd: removing the header watch", "err", errorOf("rbd_update_unwatch", im.name, -1, 0, int64(r)))
			}
		}
		close(im.watchStop)
		close(im.done)
		if im.polled {
			im.stopReaper()
		}
		im.wg.Wait()
		if r := C.rbd_close(im.img); r < 0 {
			err = errorOf("rbd_close", im.name, -1, 0, int64(r))
		}
		if im.polled {
			im.evf.Close()
			C.free(unsafe.Pointer(im.reapArgs))
			C.free(unsafe.Pointer(im.reapRets))
		}
		im.ioctx.Destroy()
		im.conn.Shutdown()
		im.self.Delete()
		im.slotMu.Lock()
		for _, s := range im.slots {
			s.h.Delete()
			C.free(s.cmem)
			s.cmem = nil
		}
		im.slots = nil
		im.slotMu.Unlock()
		im.log.Info("rbd: image closed")
	})
	return err
}
