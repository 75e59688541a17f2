package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"
	"golang.org/x/sys/unix"

	"github.com/rdisk/rdisk/blockdev"
	"github.com/rdisk/rdisk/initiator"
	"github.com/rdisk/rdisk/initiator/blockio"
	"github.com/rdisk/rdisk/internal/units"
	"github.com/urfave/cli/v2"
)

func cpCommand() *cli.Command { return cpCommandWith(protocolDialers) }

func cpCommandWith(mk dialerFactory) *cli.Command {
	return &cli.Command{
		Name:      "cp",
		Usage:     "copy a disk image to or from a remote disk (sparse-aware, with progress and --verify)",
		ArgsUsage: "SRC DST (each a local file, a block device or a URL such as nvme://HOST/NQN or nvme+tcp://HOST/NQN)",
		Description: `Copies SRC over the start of DST. All-zero blocks are not written: on a remote
disk they are deallocated (discard, or write-zeroes when the disk does not read
discarded blocks back as zeroes), a local file is left sparse. A local
destination file is created or truncated to the source's size; a remote disk or
block device must be at least as large as the source.`,
		Flags: append([]cli.Flag{
			&cli.BoolFlag{Name: "verify", Usage: "read the destination back and compare"},
			&cli.StringFlag{Name: "bs", Value: "1MiB", Usage: "copy unit (at most the remote disk's transfer limit)"},
			&cli.IntFlag{Name: "qd", Value: 8, Usage: "copy units in flight"},
			&cli.BoolFlag{Name: "progress", Usage: "show the progress bar even when stderr is not a terminal"},
			&cli.BoolFlag{Name: "no-progress", Usage: "no progress bar"},
			&cli.BoolFlag{Name: "no-sparse", Usage: "write zero blocks like any other"},
		}, append(append(hostIDFlags(), digestFlags()...), dhchapFlags()...)...),
		Action: func(c *cli.Context) error { return runCp(c, mk) },
	}
}

// cpEnd is one side of a copy.
type cpEnd struct {
	name string
	// A remote disk, or a local file.
	dev  blockdev.Device
	pool *blockio.Pool
	file *os.File
	// blockDev: a local block device (its size is fixed).
	blockDev bool
	size     int64
	// zeroOp is how a remote destination deallocates zero blocks.
	zeroOnce sync.Once
	zeroOp   blockdev.Op
}

func (e *cpEnd) close() {
	if e.pool != nil {
		e.pool.Close()
	}
	if e.dev != nil {
		e.dev.Close()
	}
	if e.file != nil {
		e.file.Close()
	}
}

func runCp(c *cli.Context, mk dialerFactory) error {
	if c.NArg() != 2 {
		return fmt.Errorf("cp takes SRC and DST, got %d arguments", c.NArg())
	}
	bs64, err := units.ParseSize(c.String("bs"))
	if err != nil || bs64 < 4096 || bs64 > 64<<20 || bs64%4096 != 0 {
		return fmt.Errorf("--bs %s: want a multiple of 4 KiB up to 64 MiB", c.String("bs"))
	}
	qd := c.Int("qd")
	if qd < 1 || qd > 256 {
		return fmt.Errorf("--qd %d: want 1 to 256", qd)
	}
	srcName, dstName := c.Args().Get(0), c.Args().Get(1)
	log, err := logger(c)
	if err != nil {
		return err
	}
	var dialers initiator.Dialers
	if initiator.IsURL(srcName) || initiator.IsURL(dstName) {
		var release func()
		if dialers, release, err = mk(c, log); err != nil {
			return err
		}
		defer release()
	}
	src, err := openCpEnd(c.Context, dialers, srcName, false, 0)
	if err != nil {
		return err
	}
	defer src.close()
	dst, err := openCpEnd(c.Context, dialers, dstName, true, src.size)
	if err != nil {
		return err
	}
	defer dst.close()
	if dst.size < src.size {
		return fmt.Errorf("%s (%s) is larger than %s (%s)", srcName, units.FormatSize(src.size), dstName, units.FormatSize(dst.size))
	}
	unit := int(bs64)
	for _, e := range []*cpEnd{src, dst} {
		if e.dev != nil {
			in := e.dev.Info()
			unit = min(unit, in.MaxTransfer/4096*4096)
			if unit < in.BlockSize || unit%in.BlockSize != 0 {
				unit = in.BlockSize
			}
		}
	}
	for _, e := range []*cpEnd{src, dst} {
		if e.dev != nil {
			if e.pool, err = blockio.NewPool(e.dev, unit, qd); err != nil {
				return fmt.Errorf("%s: %w", e.name, err)
			}
		}
	}
	showBar := !c.Bool("no-progress") && (c.Bool("progress") || isTerminal(os.Stderr))
	cp := &copier{src: src, dst: dst, unit: unit, sparse: !c.Bool("no-sparse"), log: log}
	start := time.Now()
	if err := cp.run(c.Context, qd, showBar, "copy"); err != nil {
		return err
	}
	if err := dst.flush(); err != nil {
		return fmt.Errorf("%s: flush: %w", dst.name, err)
	}
	el := time.Since(start)
	fmt.Fprintf(c.App.Writer, "copied %s from %s to %s in %v (%s/s; %s of zero blocks not written)\n",
		units.FormatSize(src.size), srcName, dstName, el.Round(time.Millisecond),
		units.FormatSize(int64(float64(src.size)/max(el.Seconds(), 1e-9))), units.FormatSize(cp.skipped.Load()))
	if dst.size > src.size {
		fmt.Fprintf(c.App.Writer, "note: %s is %s larger than the source; that tail was left as it was\n", dstName, units.FormatSize(dst.size-src.size))
	}
	if c.Bool("verify") {
		cp.verify = true
		if err := cp.run(c.Context, qd, showBar, "verify"); err != nil {
			return err
		}
		fmt.Fprintf(c.App.Writer, "verified: %s reads back the same as %s\n", dstName, srcName)
	}
	return nil
}

// openCpEnd opens a URL or a local path; a local destination regular file
// is created or truncated to size.
func openCpEnd(ctx context.Context, dialers initiator.Dialers, name string, dst bool, size int64) (*cpEnd, error) {
	e := &cpEnd{name: name}
	if initiator.IsURL(name) {
		dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		dev, err := dialers.Dial(dctx, name)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		e.dev, e.size = dev, dev.Info().Size
		if dst && dev.Info().Caps.Has(blockdev.CapReadOnly) {
			dev.Close()
			return nil, fmt.Errorf("%s is read-only", name)
		}
		return e, nil
	}
	if !dst {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		e.file = f
		st, err := f.Stat()
		if err != nil {
			f.Close()
			return nil, err
		}
		if st.IsDir() {
			f.Close()
			return nil, fmt.Errorf("%s is a directory", name)
		}
		e.blockDev = st.Mode()&os.ModeDevice != 0
		if e.size, err = f.Seek(0, io.SeekEnd); err != nil {
			f.Close()
			return nil, fmt.Errorf("%s: size: %w", name, err)
		}
		return e, nil
	}
	st, err := os.Stat(name)
	switch {
	case err == nil && st.IsDir():
		return nil, fmt.Errorf("%s is a directory", name)
	case err == nil && st.Mode()&os.ModeDevice != 0:
		f, err := os.OpenFile(name, os.O_WRONLY|os.O_EXCL, 0)
		if err != nil {
			return nil, err
		}
		e.file, e.blockDev = f, true
		if e.size, err = f.Seek(0, io.SeekEnd); err != nil {
			f.Close()
			return nil, fmt.Errorf("%s: size: %w", name, err)
		}
		return e, nil
	case err != nil && !errors.Is(err, os.ErrNotExist):
		return nil, err
	}
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	if err := f.Truncate(size); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	e.file, e.size = f, size
	return e, nil
}

func (e *cpEnd) flush() error {
	if e.pool != nil {
		return e.pool.Flush()
	}
	return e.file.Sync()
}

// copier moves the source over the destination in units, qd at a time.
type copier struct {
	src, dst *cpEnd
	unit     int
	sparse   bool
	verify   bool
	log      *slog.Logger
	next     atomic.Int64
	skipped  atomic.Int64
}

func (cp *copier) run(ctx context.Context, qd int, showBar bool, what string) error {
	total := cp.src.size
	var bar *mpb.Bar
	var prog *mpb.Progress
	if showBar {
		prog = mpb.NewWithContext(ctx, mpb.WithOutput(os.Stderr), mpb.WithRefreshRate(200*time.Millisecond), mpb.WithAutoRefresh())
		bar = prog.AddBar(total,
			mpb.PrependDecorators(decor.Name(what+" "), decor.CountersKibiByte("% .1f / % .1f")),
			mpb.AppendDecorators(decor.AverageSpeed(decor.SizeB1024(0), " % .1f"), decor.Name(" ETA "), decor.AverageETA(decor.ET_STYLE_GO)))
	}
	cp.next.Store(0)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	for range qd {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := cp.worker(ctx, bar); err != nil {
				once.Do(func() { first = err; cancel() })
			}
		}()
	}
	wg.Wait()
	if prog != nil {
		if first != nil {
			bar.Abort(false)
		}
		prog.Wait()
	}
	if first == nil && ctx.Err() != nil {
		first = context.Cause(ctx)
	}
	return first
}

// worker copies (or compares) units until none is left.
func (cp *copier) worker(ctx context.Context, bar *mpb.Bar) error {
	var sck, dck *blockio.Chunk
	var err error
	if cp.src.pool != nil {
		if sck, err = cp.src.pool.Get(ctx); err != nil {
			return err
		}
		defer cp.src.pool.Put(sck)
	}
	if cp.dst.pool != nil {
		if dck, err = cp.dst.pool.Get(ctx); err != nil {
			return err
		}
		defer cp.dst.pool.Put(dck)
	}
	var plain, plain2 []byte
	if sck == nil || dck == nil || cp.verify {
		plain, plain2 = make([]byte, cp.unit), make([]byte, cp.unit)
	}
	for ctx.Err() == nil {
		off := cp.next.Add(int64(cp.unit)) - int64(cp.unit)
		if off >= cp.src.size {
			return nil
		}
		n := int(min(int64(cp.unit), cp.src.size-off))
		// Read the source: into the destination's registered memory when
		// the destination is remote and the source is not (no copy).
		buf := plain
		switch {
		case sck != nil:
			buf = sck.Bytes()
		case dck != nil && !cp.verify:
			buf = dck.Bytes()
		}
		if err := cp.src.read(sck, buf, off, n); err != nil {
			return err
		}
		data := buf[:n]
		if cp.verify {
			other := plain2
			if dck != nil {
				other = dck.Bytes()
			}
			if err := cp.dst.read(dck, other, off, n); err != nil {
				return err
			}
			if i := firstDiff(data, other[:n]); i >= 0 {
				return fmt.Errorf("verify: %s differs from %s at byte %d", cp.dst.name, cp.src.name, off+int64(i))
			}
		} else if cp.sparse && isZero(data) {
			if err := cp.dst.zero(dck, off, n); err != nil {
				return err
			}
			cp.skipped.Add(int64(n))
		} else {
			if dck != nil && &buf[0] != &dck.Bytes()[0] {
				copy(dck.Bytes(), data)
			}
			if err := cp.dst.write(dck, data, off, n); err != nil {
				return err
			}
		}
		if bar != nil {
			bar.IncrInt64(int64(n))
		}
	}
	return context.Cause(ctx)
}

// read fills buf[:n] from offset off (n may end in a partial block at the
// end of a local source: the rest of the block reads as zeroes).
func (e *cpEnd) read(ck *blockio.Chunk, buf []byte, off int64, n int) error {
	if ck != nil {
		bs := e.dev.Info().BlockSize
		aligned := (n + bs - 1) / bs * bs
		if err := ck.Do(blockdev.OpRead, off, aligned, 0); err != nil {
			return fmt.Errorf("%s: reading %d bytes at %d: %w", e.name, n, off, err)
		}
		return nil
	}
	k, err := e.file.ReadAt(buf[:n], off)
	if err != nil && !(errors.Is(err, io.EOF) && k == n) {
		return fmt.Errorf("%s: %w", e.name, err)
	}
	return nil
}

// write stores data (already in the chunk's memory for a remote end).
func (e *cpEnd) write(ck *blockio.Chunk, data []byte, off int64, n int) error {
	if ck != nil {
		bs := e.dev.Info().BlockSize
		aligned := (n + bs - 1) / bs * bs
		clear(ck.Bytes()[n:aligned])
		if err := ck.Do(blockdev.OpWrite, off, aligned, 0); err != nil {
			return fmt.Errorf("%s: writing %d bytes at %d: %w", e.name, n, off, err)
		}
		return nil
	}
	if _, err := e.file.WriteAt(data, off); err != nil {
		return fmt.Errorf("%s: %w", e.name, err)
	}
	return nil
}

// zero makes [off, off+n) read as zeroes without writing data where it
// can: deallocate on a remote disk, nothing on a fresh local file, zero-out
// on a block device.
func (e *cpEnd) zero(ck *blockio.Chunk, off int64, n int) error {
	switch {
	case ck != nil:
		info := e.dev.Info()
		bs := info.BlockSize
		aligned := (n + bs - 1) / bs * bs
		e.zeroOnce.Do(func() { e.zeroOp = e.probeZero(ck, off, aligned) })
		op := e.zeroOp
		if op == blockdev.OpWrite {
			clear(ck.Bytes()[:aligned])
		}
		if err := ck.Do(op, off, aligned, 0); err != nil {
			return fmt.Errorf("%s: %s of %d bytes at %d: %w", e.name, op, aligned, off, err)
		}
		return nil
	case e.blockDev:
		r := [2]uint64{uint64(off), uint64(n)}
		if _, _, errno := unix.Syscall(unix.SYS_IOCTL, e.file.Fd(), unix.BLKZEROOUT, uintptr(unsafe.Pointer(&r[0]))); errno != 0 {
			if _, err := e.file.WriteAt(make([]byte, n), off); err != nil {
				return fmt.Errorf("%s: %w", e.name, err)
			}
		}
		return nil
	}
	return nil // a fresh sparse file reads zeroes there already
}

// probeZero picks how a remote disk deallocates: discard when the disk
// reads a discarded range back as zeroes (checked once, on a range about
// to be zeroed anyway), else write-zeroes, else plain writes.
func (e *cpEnd) probeZero(ck *blockio.Chunk, off int64, n int) blockdev.Op {
	caps := e.dev.Info().Caps
	if caps.Has(blockdev.CapDiscard) {
		if ck.Do(blockdev.OpDiscard, off, n, 0) == nil && ck.Do(blockdev.OpRead, off, n, 0) == nil && isZero(ck.Bytes()[:n]) {
			return blockdev.OpDiscard
		}
	}
	if caps.Has(blockdev.CapWriteZeroes) && int64(n) <= e.dev.Info().MaxZeroes {
		return blockdev.OpWriteZeroes
	}
	return blockdev.OpWrite
}

// isZero reports whether b is all zeroes, 8 bytes at a time.
func isZero(b []byte) bool {
	for len(b) >= 8 && uintptr(unsafe.Pointer(&b[0]))%8 != 0 {
		if b[0] != 0 {
			return false
		}
		b = b[1:]
	}
	words := unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/8)
	for _, w := range words {
		if w != 0 {
			return false
		}
	}
	for _, c := range b[len(words)*8:] {
		if c != 0 {
			return false
		}
	}
	return true
}

// firstDiff returns the first index where a and b differ, or -1.
func firstDiff(a, b []byte) int {
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}

// isTerminal tells whether f is a terminal.
func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
