package host_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rdisk/rdisk/backstore"
	"github.com/rdisk/rdisk/blockdev"
	"github.com/rdisk/rdisk/iser"
	iserinit "github.com/rdisk/rdisk/iser/initiator"
	isertarget "github.com/rdisk/rdisk/iser/target"
	"github.com/rdisk/rdisk/rdma/iwarp"
	"github.com/rdisk/rdisk/scsi"
	"github.com/rdisk/rdisk/scsi/host"
	srpinit "github.com/rdisk/rdisk/srp/initiator"
	srptarget "github.com/rdisk/rdisk/srp/target"
)

// The same logical units served by rdisk's SRP and iSCSI targets, reached
// by the SRP initiator and the iSCSI initiator (iSER and iSCSI/TCP) over
// the pure-Go iWARP provider on 127.0.0.1: the initiators share the SCSI
// host layer, so they must describe each LU the same way and report each
// failure with the same blockdev error.

const (
	testIQN       = "iqn.2026-11.io.rdisk:host-test"
	testInitiator = "iqn.2026-11.io.rdisk:host-test-initiator"
	// initiatorMaxTransfer is every initiator's transfer limit, so that
	// the LU's block limits decide.
	initiatorMaxTransfer = 256 << 10
)

// lockedDisk serializes a RAM disk's data accesses: backstore.Mem copies
// without locks, and a write and a later read ordered only through the
// network look racy to the race detector. It has no Discard or
// WriteZeroes: the LU is fully provisioned and writes zeroes as a pattern.
type lockedDisk struct {
	*backstore.Mem
	mu sync.RWMutex
}

func (d *lockedDisk) ReadAt(p []byte, off int64) error {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.Mem.ReadAt(p, off)
}

func (d *lockedDisk) WriteAt(p []byte, off int64, f backstore.WriteFlags) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.Mem.WriteAt(p, off, f)
}

// plainDisk hides every optional interface of the disk: a "block-less"
// disk that can neither deallocate nor zero without writing.
type plainDisk struct{ backstore.Disk }

// thinDisk is a lockedDisk that deallocates (thin provisioned: LBPME,
// UNMAP) and writes zeroes without a pattern.
type thinDisk struct{ *lockedDisk }

func (d thinDisk) Discard(off, length int64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.Mem.Discard(off, length)
}

func (d thinDisk) WriteZeroes(off, length int64, f backstore.WriteFlags) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.Mem.WriteZeroes(off, length, f)
}

func newLocked(t testing.TB, size int64, bs int) *lockedDisk {
	m, err := backstore.NewMem(size, bs)
	if err != nil {
		t.Fatal(err)
	}
	return &lockedDisk{Mem: m}
}

func thin(size int64, bs int) func(testing.TB) backstore.Disk {
	return func(t testing.TB) backstore.Disk { return thinDisk{newLocked(t, size, bs)} }
}

func blockless(size int64, bs int) func(testing.TB) backstore.Disk {
	return func(t testing.TB) backstore.Disk { return plainDisk{newLocked(t, size, bs)} }
}

// opened is a LUN opened through one transport.
type opened struct {
	dev    blockdev.Device
	runner host.Runner
	lu     host.LU
}

type transport struct {
	name   string
	prefix string // of I/O error messages
	open   func(t *testing.T, disk backstore.Disk, cfg scsi.LUConfig) opened
}

func provider(t testing.TB) *iwarp.Provider {
	p, err := iwarp.New(iwarp.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func ctx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return c
}

func openSRP(t *testing.T, disk backstore.Disk, cfg scsi.LUConfig) opened {
	tp := provider(t)
	tg, err := srptarget.New(srptarget.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tg.Close() })
	port, err := tg.AddPort(srptarget.PortConfig{IDExt: 1, IOCGUID: 2, AllowAnyInitiator: true})
	if err != nil {
		t.Fatal(err)
	}
	lu, err := scsi.NewLU(disk, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := port.Map(0, lu); err != nil {
		t.Fatal(err)
	}
	addr, err := tg.Listen(context.Background(), tp, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d, err := srpinit.Open(ctx(t), provider(t), port.URL(addr.String()), srpinit.Config{MaxTransfer: initiatorMaxTransfer})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return opened{dev: d, runner: d.Session(), lu: d.LU()}
}

func openISCSI(tr iser.Transport) func(t *testing.T, disk backstore.Disk, cfg scsi.LUConfig) opened {
	return func(t *testing.T, disk backstore.Disk, cfg scsi.LUConfig) opened {
		tp := provider(t)
		tg, err := isertarget.New(isertarget.Config{
			Targets:  []isertarget.TargetConfig{{Name: testIQN, LUNs: []isertarget.LUNConfig{{LUN: 0, Disk: disk, LU: cfg}}}},
			Provider: tp, Logger: slog.New(slog.DiscardHandler),
		})
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- tg.Serve(context.Background(), ln) }()
		t.Cleanup(func() {
			tg.Close()
			if err := <-done; err != nil {
				t.Errorf("Serve: %v", err)
			}
		})
		host, port, _ := net.SplitHostPort(ln.Addr().String())
		n, _ := strconv.Atoi(port)
		u := iserinit.URL{Transport: tr, Host: host, Port: n, Target: testIQN}
		d, err := iserinit.Open(ctx(t), u, iserinit.Config{InitiatorName: testInitiator, Provider: provider(t),
			MaxTransfer: initiatorMaxTransfer, CommandTimeout: 20 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		return opened{dev: d, runner: d.Session(), lu: d.LU()}
	}
}

var transports = []transport{
	{"srp", "srp: ", openSRP},
	{"iser", "iscsi: ", openISCSI(iser.TransportISER)},
	{"iscsi-tcp", "iscsi: ", openISCSI(iser.TransportTCP)},
}

// outcome is what a command came to: the blockdev sentinel and, for a
// CHECK CONDITION, the sense key and code.
func outcome(err error) string {
	if err == nil {
		return "ok"
	}
	var se *host.StatusError
	if errors.As(err, &se) {
		return fmt.Sprintf("%v (%s %s)", se.Class(), se.Parsed.Key, se.Parsed.ASC)
	}
	for _, s := range []error{blockdev.ErrClosed, blockdev.ErrUnsupported, blockdev.ErrReadOnly, blockdev.ErrRange,
		blockdev.ErrTooLarge, blockdev.ErrInvalid, blockdev.ErrIO} {
		if errors.Is(err, s) {
			return s.Error()
		}
	}
	return "error: " + err.Error()
}

// raw sends the command BuildIO makes for r straight to the LU through the
// transport's Runner, without blockdev.Check: the target judges it.
func raw(t *testing.T, o opened, r blockdev.Request) error {
	t.Helper()
	var cdb [16]byte
	param := make([]byte, host.UnmapParamLen)
	io, err := o.lu.BuildIO(&cdb, param, &r)
	if err != nil {
		t.Fatal(err)
	}
	c := &host.Command{CDB: cdb[:], Dir: io.Dir}
	switch io.Data {
	case host.DataBuffer:
		c.Data = make([]byte, io.Len)
	case host.DataParam:
		c.Data = param
	case host.DataZeroBlock:
		c.Data = make([]byte, io.Len)
	}
	return host.Do(ctx(t), o.runner, c)
}

// submit runs one request through the device; data is written for a
// write and filled by a read.
func submit(t *testing.T, d blockdev.Device, op blockdev.Op, off int64, n int, data []byte) error {
	t.Helper()
	r := &blockdev.Request{Op: op, Offset: off, Length: n}
	if op == blockdev.OpRead || op == blockdev.OpWrite {
		b, err := d.AllocBuffer(n)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Release()
		copy(b.Bytes(), data)
		r.Buf = b
		defer func() { copy(data, b.Bytes()) }()
	}
	return blockdev.Do(d, r)
}

// modeSelectSWP turns the software write protection of the control mode
// page on or off (MODE SENSE the current page, flip SWP, MODE SELECT it).
func modeSelectSWP(t *testing.T, r host.Runner, on bool) {
	t.Helper()
	c := &host.Command{CDB: []byte{scsi.OpModeSense6, 0x08, 0x0a, 0, 255, 0}, Dir: scsi.DirIn, Data: make([]byte, 255)}
	if err := host.Do(ctx(t), r, c); err != nil {
		t.Fatal(err)
	}
	d := c.DataIn()
	if len(d) < 4+12 || d[4]&0x3f != 0x0a {
		t.Fatalf("control mode page: %x", d)
	}
	p := append([]byte{0, 0, 0, 0}, d[4:4+12]...)
	p[4] &= 0x3f // PS
	p[4+4] &^= 0x08
	if on {
		p[4+4] |= 0x08
	}
	c = &host.Command{CDB: []byte{scsi.OpModeSelect6, 0x10, 0, 0, uint8(len(p)), 0}, Dir: scsi.DirOut, Data: p}
	if err := host.Do(ctx(t), r, c); err != nil {
		t.Fatal(err)
	}
}

func TestTransportsAgree(t *testing.T) {
	const size = 8 << 30 // sparse: larger than every WRITE SAME limit tested
	const (
		base   = blockdev.CapFlush | blockdev.CapFUA | blockdev.CapWriteZeroes
		errRO  = "blockdev: device is read-only (DATA PROTECT 27h/00h)"
		errOOR = "blockdev: request beyond the end of the device (ILLEGAL REQUEST 21h/00h)"
	)
	for _, c := range []struct {
		name      string
		disk      func(testing.TB) backstore.Disk
		lu        scsi.LUConfig
		caps      blockdev.Caps
		maxXfer   int
		maxZeroes int64
		// Outcomes of raw commands: a write at LBA 0, an UNMAP of the
		// first block, a WRITE SAME longer than the LU's limit.
		write, unmap, longWS string
	}{
		{"thin RAM disk", thin(size, 512), scsi.LUConfig{MaxTransferBlocks: 256, MaxWriteSameBlocks: 0xffff},
			base | blockdev.CapDiscard, 128 << 10, 0xffff * 512,
			"ok", "ok", "blockdev: invalid request (ILLEGAL REQUEST 24h/00h)"},
		{"read-only thin LU", thin(size, 512), scsi.LUConfig{ReadOnly: true, MaxTransferBlocks: 256, MaxWriteSameBlocks: 0xffff},
			base | blockdev.CapDiscard | blockdev.CapReadOnly, 128 << 10, 0xffff * 512,
			errRO, errRO, "blockdev: invalid request (ILLEGAL REQUEST 24h/00h)"},
		{"block-less disk", blockless(size, 512), scsi.LUConfig{MaxTransferBlocks: 256, MaxWriteSameBlocks: 0xffff},
			base, 128 << 10, 0xffff * 512,
			"ok", "blockdev: operation not supported (ILLEGAL REQUEST 20h/00h)", "blockdev: invalid request (ILLEGAL REQUEST 24h/00h)"},
		{"read-only block-less disk", blockless(size, 512), scsi.LUConfig{ReadOnly: true, MaxWriteSameBlocks: 0xffff},
			base | blockdev.CapReadOnly, initiatorMaxTransfer, 0xffff * 512,
			errRO, "blockdev: operation not supported (ILLEGAL REQUEST 20h/00h)", "blockdev: invalid request (ILLEGAL REQUEST 24h/00h)"},
		{"4 KiB blocks, short WRITE SAME limit", thin(size, 4096), scsi.LUConfig{MaxTransferBlocks: 16, MaxWriteSameBlocks: 8},
			base | blockdev.CapDiscard, 64 << 10, 8 * 4096,
			"ok", "ok", "blockdev: invalid request (ILLEGAL REQUEST 24h/00h)"},
		{"large WRITE SAME limit", thin(size, 512), scsi.LUConfig{MaxTransferBlocks: 4096, MaxWriteSameBlocks: 1 << 30},
			base | blockdev.CapDiscard, initiatorMaxTransfer, host.MaxWriteSameBlocks * 512,
			"ok", "ok", "blockdev: request beyond the end of the device (ILLEGAL REQUEST 21h/00h)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var first *blockdev.Info
			results := map[string][]string{}
			for _, tr := range transports {
				t.Run(tr.name, func(t *testing.T) {
					o := tr.open(t, c.disk(t), c.lu)
					d, info := o.dev, o.dev.Info()
					if info.Caps != c.caps || info.MaxTransfer != c.maxXfer || info.MaxZeroes != c.maxZeroes ||
						info.Size != size || info.BlockSize != o.lu.BlockSize {
						t.Errorf("info %+v: want caps %05b, max transfer %d, max zeroes %d", info, c.caps, c.maxXfer, c.maxZeroes)
					}
					if first == nil {
						first = &info
					} else if a, b := *first, info; a.Caps != b.Caps || a.MaxTransfer != b.MaxTransfer || a.MaxZeroes != b.MaxZeroes ||
						a.Size != b.Size || a.BlockSize != b.BlockSize {
						t.Errorf("info %+v differs from %s's %+v", b, transports[0].name, a)
					}
					bs := info.BlockSize
					blocks := info.Size / int64(bs)

					// The target's answers to commands the initiator
					// would refuse itself.
					var got []string
					check := func(what, want string, err error) {
						t.Helper()
						g := outcome(err)
						got = append(got, what+": "+g)
						if g != want {
							t.Errorf("%s: %s, want %s", what, g, want)
						}
					}
					check("read past the end", errOOR, raw(t, o, blockdev.Request{Op: blockdev.OpRead, Offset: info.Size, Length: bs}))
					check("read straddling the end", errOOR, raw(t, o, blockdev.Request{Op: blockdev.OpRead, Offset: info.Size - int64(bs), Length: 2 * bs}))
					check("write", c.write, raw(t, o, blockdev.Request{Op: blockdev.OpWrite, Offset: 0, Length: bs}))
					check("unmap", c.unmap, raw(t, o, blockdev.Request{Op: blockdev.OpDiscard, Offset: 0, Length: bs}))
					wsLen := int64(c.lu.MaxWriteSameBlocks+1) * int64(bs)
					check("long write same", c.longWS, raw(t, o, blockdev.Request{Op: blockdev.OpWriteZeroes, Offset: 0, Length: int(min(wsLen, 1<<40))}))
					wantWS := "ok"
					if c.caps.Has(blockdev.CapReadOnly) {
						wantWS = errRO
					}
					check("write same of the last block", wantWS, raw(t, o, blockdev.Request{Op: blockdev.OpWriteZeroes, Offset: info.Size - int64(bs), Length: bs}))
					check("unknown opcode", "blockdev: operation not supported (ILLEGAL REQUEST 20h/00h)",
						host.Do(ctx(t), o.runner, &host.Command{CDB: []byte{0xc5, 0, 0, 0, 0, 0}}))
					results[tr.name] = got

					// Through blockdev.Device.
					n := 8 * bs
					pattern := bytes.Repeat([]byte{0xa5}, n)
					rd := make([]byte, n)
					if c.caps.Has(blockdev.CapReadOnly) {
						for _, op := range []blockdev.Op{blockdev.OpWrite, blockdev.OpWriteZeroes, blockdev.OpDiscard} {
							want := blockdev.ErrReadOnly
							if op == blockdev.OpDiscard && !c.caps.Has(blockdev.CapDiscard) {
								want = blockdev.ErrUnsupported
							}
							if err := submit(t, d, op, 0, n, pattern); !errors.Is(err, want) {
								t.Errorf("%v on a read-only LU: %v, want %v", op, err, want)
							}
						}
						if err := submit(t, d, blockdev.OpRead, (blocks-8)*int64(bs), n, rd); err != nil {
							t.Errorf("read: %v", err)
						}
						return
					}
					if err := submit(t, d, blockdev.OpWrite, 0, n, pattern); err != nil {
						t.Fatal(err)
					}
					if err := submit(t, d, blockdev.OpWriteZeroes, int64(bs), n-2*bs, nil); err != nil {
						t.Fatalf("write-zeroes: %v", err)
					}
					if err := submit(t, d, blockdev.OpRead, 0, n, rd); err != nil {
						t.Fatal(err)
					}
					want := bytes.Clone(pattern)
					clear(want[bs : n-bs])
					if !bytes.Equal(rd, want) {
						t.Errorf("after write-zeroes of blocks 1-6: %x", rd)
					}
					if err := submit(t, d, blockdev.OpWriteZeroes, 0, int(info.MaxZeroes), nil); err != nil {
						t.Errorf("write-zeroes of MaxZeroes: %v", err)
					}
					err := submit(t, d, blockdev.OpDiscard, 0, n, nil)
					switch {
					case !c.caps.Has(blockdev.CapDiscard):
						if !errors.Is(err, blockdev.ErrUnsupported) {
							t.Errorf("discard without CapDiscard: %v", err)
						}
					case err != nil:
						t.Errorf("discard: %v", err)
					case o.lu.Pages.Capacity.LBPRZ:
						if err := submit(t, d, blockdev.OpRead, 0, n, rd); err != nil || !bytes.Equal(rd, make([]byte, n)) {
							t.Errorf("read after discard with LBPRZ: %v %x", err, rd)
						}
					}

					// A target-side refusal on the I/O path: write-protect
					// the LU behind the open device.
					modeSelectSWP(t, o.runner, true)
					err = submit(t, d, blockdev.OpWrite, 0, n, pattern)
					var se *host.StatusError
					if !errors.Is(err, blockdev.ErrReadOnly) || !errors.As(err, &se) || se.Command != host.NameWrite16 ||
						!strings.HasPrefix(err.Error(), tr.prefix) {
						t.Errorf("write to a software-write-protected LU: %v", err)
					}
					if err := submit(t, d, blockdev.OpWriteZeroes, 0, n, nil); !errors.Is(err, blockdev.ErrReadOnly) {
						t.Errorf("write-zeroes to a software-write-protected LU: %v", err)
					}
					modeSelectSWP(t, o.runner, false)
					if err := submit(t, d, blockdev.OpWrite, 0, n, pattern); err != nil {
						t.Errorf("write after SWP off: %v", err)
					}
				})
			}
			for _, tr := range transports[1:] {
				if a, b := strings.Join(results[transports[0].name], "\n"), strings.Join(results[tr.name], "\n"); a != b && a != "" && b != "" {
					t.Errorf("outcomes differ:\n%s:\n%s\n%s:\n%s", transports[0].name, a, tr.name, b)
				}
			}
		})
	}
}

// TestSteadyStateAllocs checks that every kind of request, once buffers
// and slots are warm, allocates nothing on the initiator (the target's
// allocations count too: it allocates nothing either).
func TestSteadyStateAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			o := tr.open(t, thin(64<<20, 512)(t), scsi.LUConfig{MaxWriteSameBlocks: 0xffff})
			d := o.dev
			const inflight = 8
			c := make(chan *blockdev.Request, inflight)
			reqs := make([]blockdev.Request, inflight)
			for i := range reqs {
				b, err := d.AllocBuffer(8192)
				if err != nil {
					t.Fatal(err)
				}
				defer b.Release()
				reqs[i] = blockdev.Request{Buf: b, Length: 8192, C: c}
			}
			ops := [...]blockdev.Op{blockdev.OpWrite, blockdev.OpRead, blockdev.OpFlush, blockdev.OpWriteZeroes, blockdev.OpDiscard}
			run := func(n int) {
				for i := range reqs {
					r := &reqs[i]
					r.Op, r.Flags, r.Offset = blockdev.OpWrite, blockdev.FUA, int64(i)*8192
					if err := d.Submit(r); err != nil {
						t.Fatal(err)
					}
				}
				for i := 0; i < n; i++ {
					r := <-c
					if r.Err != nil {
						t.Fatalf("%v: %v", r.Op, r.Err)
					}
					r.Op = ops[i%len(ops)]
					r.Offset = int64(i%1000) * 8192
					if err := d.Submit(r); err != nil {
						t.Fatal(err)
					}
				}
				for range reqs {
					<-c
				}
			}
			run(2000) // warm up: buffers, chunks, goroutine stacks
			var a, b runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&a)
			const n = 5000
			run(n)
			runtime.ReadMemStats(&b)
			per := float64(b.Mallocs-a.Mallocs) / n
			t.Logf("%.3f allocations per request (initiator and target)", per)
			if per > 0.5 {
				t.Errorf("%.3f allocations per request in the steady state", per)
			}
		})
	}
}
