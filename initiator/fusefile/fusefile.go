package fusefile

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/rdisk/rdisk/blockdev"
	"github.com/rdisk/rdisk/initiator/blockio"
)

// Config describes a mount.
type Config struct {
	// Dir is the mount point, an existing directory.
	Dir string
	// Name is the file's name inside Dir.
	Name string
	// Dev is the device; the mount never closes it.
	Dev blockdev.Device
	// ReadOnly refuses writes with EROFS.
	ReadOnly bool
	// Buffers is the number of requests served at once [16].
	Buffers int
	// Logger receives errors [discard].
	Logger *slog.Logger
}

// Mount is a mounted disk file. Its methods are safe for concurrent use.
type Mount struct {
	cfg  Config
	srv  *fuse.Server
	pool *blockio.Pool
	log  *slog.Logger

	mu      sync.Mutex
	stopped bool
}

// New mounts the file system and starts serving it.
func New(cfg Config) (*Mount, error) {
	if cfg.Dev == nil || cfg.Name == "" || cfg.Dir == "" {
		return nil, errors.New("fusefile: a mount needs a device, a directory and a name")
	}
	if filepath.Base(cfg.Name) != cfg.Name || cfg.Name == "." || cfg.Name == ".." {
		return nil, fmt.Errorf("fusefile: file name %q must not contain '/'", cfg.Name)
	}
	if st, err := os.Stat(cfg.Dir); err != nil {
		return nil, fmt.Errorf("fusefile: mount point: %w", err)
	} else if !st.IsDir() {
		return nil, fmt.Errorf("fusefile: mount point %s is not a directory", cfg.Dir)
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return nil, fmt.Errorf("fusefile: FUSE is not available (/dev/fuse: %w)", err)
	}
	if cfg.Buffers <= 0 {
		cfg.Buffers = 16
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	info := cfg.Dev.Info()
	maxIO := min(info.MaxTransfer, 1<<20)
	pool, err := blockio.NewPool(cfg.Dev, maxIO, cfg.Buffers)
	if err != nil {
		return nil, err
	}
	m := &Mount{cfg: cfg, pool: pool, log: cfg.Logger}
	root := &fs.Inode{}
	file := &diskNode{m: m, size: info.Size, mtime: time.Now()}
	long := 24 * time.Hour
	opts := &fs.Options{
		MountOptions: fuse.MountOptions{
			FsName:        "rdisk:" + cfg.Name,
			Name:          "rdisk",
			DirectMount:   true,
			MaxWrite:      maxIO,
			MaxBackground: 64,
			DisableXAttrs: true,
			Logger:        log.New(discard{}, "", 0),
		},
		EntryTimeout: &long,
		AttrTimeout:  &long,
		Logger:       log.New(discard{}, "", 0),
		OnAdd: func(ctx context.Context) {
			ch := root.NewPersistentInode(ctx, file, fs.StableAttr{Mode: syscall.S_IFREG, Ino: 2})
			root.AddChild(cfg.Name, ch, false)
		},
	}
	srv, err := fs.Mount(cfg.Dir, root, opts)
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("fusefile: mounting %s: %w", cfg.Dir, err)
	}
	m.srv = srv
	return m, nil
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// Path is the disk file: Dir/Name.
func (m *Mount) Path() string { return filepath.Join(m.cfg.Dir, m.cfg.Name) }

// Dir is the mount point.
func (m *Mount) Dir() string { return m.cfg.Dir }

// ErrBusy: the file is in use (a loop device or an open file keeps the
// mount busy).
var ErrBusy = errors.New("fusefile: mount is busy")

// Unmount unmounts the file system and waits for the server to stop. It
// fails with ErrBusy while the file is in use, unless force is set: then
// it detaches the mount lazily (users keep it until they let go, with I/O
// failing once the device is closed).
func (m *Mount) Unmount(force bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopped {
		return nil
	}
	err := m.srv.Unmount()
	if err != nil {
		if !force {
			if errors.Is(err, syscall.EBUSY) || isBusy(err) {
				return fmt.Errorf("%w: %s (detach the loop device or close the file first): %v", ErrBusy, m.Path(), err)
			}
			return fmt.Errorf("fusefile: unmounting %s: %w", m.cfg.Dir, err)
		}
		if derr := syscall.Unmount(m.cfg.Dir, syscall.MNT_DETACH); derr != nil {
			return fmt.Errorf("fusefile: detaching %s: %w", m.cfg.Dir, derr)
		}
		// The server keeps serving until the last user lets go; the
		// pool stays with it.
		m.stopped = true
		go func() {
			m.srv.Wait()
			m.pool.Close()
		}()
		return nil
	}
	m.srv.Wait()
	m.stopped = true
	return m.pool.Close()
}

func isBusy(err error) bool {
	return err != nil && (errors.Is(err, syscall.EBUSY) || containsBusy(err.Error()))
}

func containsBusy(s string) bool {
	for i := 0; i+4 <= len(s); i++ {
		if s[i:i+4] == "busy" {
			return true
		}
	}
	return false
}

// diskNode is the disk file.
type diskNode struct {
	fs.Inode
	m     *Mount
	size  int64
	mtime time.Time
}

var (
	_ fs.NodeGetattrer = (*diskNode)(nil)
	_ fs.NodeSetattrer = (*diskNode)(nil)
	_ fs.NodeOpener    = (*diskNode)(nil)
	_ fs.NodeReader    = (*diskNode)(nil)
	_ fs.NodeWriter    = (*diskNode)(nil)
	_ fs.NodeFsyncer   = (*diskNode)(nil)
	_ fs.NodeFlusher   = (*diskNode)(nil)
	_ fs.NodeAllocater = (*diskNode)(nil)
)

func (n *diskNode) attr(out *fuse.Attr) {
	out.Mode = syscall.S_IFREG | 0o600
	if n.m.cfg.ReadOnly {
		out.Mode = syscall.S_IFREG | 0o400
	}
	out.Size = uint64(n.size)
	out.Blocks = uint64(n.size+511) / 512
	out.Blksize = uint32(max(4096, n.m.pool.Info().BlockSize))
	out.Nlink = 1
	out.SetTimes(&n.mtime, &n.mtime, &n.mtime)
}

func (n *diskNode) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	n.attr(&out.Attr)
	return 0
}

// Setattr accepts only what leaves the disk as it is (a truncate to its
// own size, times and modes are ignored): a disk cannot be resized here.
func (n *diskNode) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if sz, ok := in.GetSize(); ok && int64(sz) != n.size {
		return syscall.EPERM
	}
	n.attr(&out.Attr)
	return 0
}

// Open serves every open with direct I/O: no page cache between the
// loop device (or any reader) and the disk, so fsync reaches the device
// with nothing left behind.
func (n *diskNode) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if n.m.cfg.ReadOnly && flags&(syscall.O_WRONLY|syscall.O_RDWR) != 0 {
		return nil, 0, syscall.EROFS
	}
	return nil, fuse.FOPEN_DIRECT_IO | fuse.FOPEN_PARALLEL_DIRECT_WRITES, 0
}

// chunkRead is a read answered from a pool chunk without a copy; the chunk
// goes back to the pool when the reply has been written.
type chunkRead struct {
	p  *blockio.Pool
	ck *blockio.Chunk
	n  int
}

func (r *chunkRead) Bytes(buf []byte) ([]byte, fuse.Status) { return r.ck.Bytes()[:r.n], fuse.OK }
func (r *chunkRead) Size() int                              { return r.n }
func (r *chunkRead) Done()                                  { r.p.Put(r.ck) }

func (n *diskNode) Read(ctx context.Context, f fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if off >= n.size || len(dest) == 0 {
		return fuse.ReadResultData(nil), 0
	}
	k := int(min(int64(len(dest)), n.size-off))
	p := n.m.pool
	bs := int64(p.Info().BlockSize)
	if off%bs == 0 && int64(k)%bs == 0 && k <= p.ChunkSize() {
		ck, err := p.Get(ctx)
		if err != nil {
			return nil, syscall.EINTR
		}
		if err := ck.Do(blockdev.OpRead, off, k, 0); err != nil {
			p.Put(ck)
			return nil, n.errno("read", off, k, err)
		}
		return &chunkRead{p: p, ck: ck, n: k}, 0
	}
	if err := p.ReadAt(dest[:k], off); err != nil {
		return nil, n.errno("read", off, k, err)
	}
	return fuse.ReadResultData(dest[:k]), 0
}

func (n *diskNode) Write(ctx context.Context, f fs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	if n.m.cfg.ReadOnly {
		return 0, syscall.EROFS
	}
	if off >= n.size && len(data) > 0 {
		return 0, syscall.ENOSPC
	}
	k := int(min(int64(len(data)), n.size-off))
	p := n.m.pool
	bs := int64(p.Info().BlockSize)
	if off%bs == 0 && int64(k)%bs == 0 && k <= p.ChunkSize() {
		ck, err := p.Get(ctx)
		if err != nil {
			return 0, syscall.EINTR
		}
		copy(ck.Bytes(), data[:k])
		err = ck.Do(blockdev.OpWrite, off, k, 0)
		p.Put(ck)
		if err != nil {
			return 0, n.errno("write", off, k, err)
		}
		return uint32(k), 0
	}
	if err := p.WriteAt(data[:k], off, false); err != nil {
		return 0, n.errno("write", off, k, err)
	}
	return uint32(k), 0
}

// Fsync flushes the device's volatile cache: what the loop device sends
// for a file system's flush and FUA requests.
func (n *diskNode) Fsync(ctx context.Context, f fs.FileHandle, flags uint32) syscall.Errno {
	if err := n.m.pool.Flush(); err != nil {
		return n.errno("flush", 0, 0, err)
	}
	return 0
}

// Flush (close(2)) has nothing to do: writes are not cached.
func (n *diskNode) Flush(ctx context.Context, f fs.FileHandle) syscall.Errno { return 0 }

// Allocate maps fallocate: punching a hole discards (what the loop device
// sends for a discard), zeroing a range writes zeroes; plain allocation
// succeeds (the disk is all there).
func (n *diskNode) Allocate(ctx context.Context, f fs.FileHandle, off uint64, size uint64, mode uint32) syscall.Errno {
	const (
		keepSize  = 0x01
		punchHole = 0x02
		zeroRange = 0x10
	)
	if int64(off) < 0 || int64(size) < 0 || int64(off) > n.size || int64(size) > n.size-int64(off) {
		if mode&(punchHole|zeroRange) == 0 {
			return syscall.EFBIG
		}
		size = uint64(max(n.size-int64(off), 0))
	}
	if n.m.cfg.ReadOnly && mode&(punchHole|zeroRange) != 0 {
		return syscall.EROFS
	}
	var err error
	switch {
	case mode&punchHole != 0:
		err = n.m.pool.Zero(int64(off), int64(size), true)
	case mode&zeroRange != 0:
		err = n.m.pool.Zero(int64(off), int64(size), false)
	case mode&^keepSize != 0:
		return syscall.EOPNOTSUPP
	}
	if err != nil {
		return n.errno("fallocate", int64(off), int(size), err)
	}
	return 0
}

// errno maps a device error to the errno the kernel gets, logging it.
func (n *diskNode) errno(what string, off int64, k int, err error) syscall.Errno {
	n.m.log.Warn("fusefile: I/O error", "file", n.m.Path(), "op", what, "offset", off, "length", k, "err", err)
	switch {
	case errors.Is(err, blockdev.ErrReadOnly):
		return syscall.EROFS
	case errors.Is(err, blockdev.ErrRange):
		return syscall.ENOSPC
	case errors.Is(err, blockdev.ErrUnsupported):
		return syscall.EOPNOTSUPP
	case errors.Is(err, blockdev.ErrInvalid), errors.Is(err, blockdev.ErrAlignment):
		return syscall.EINVAL
	}
	return syscall.EIO
}
