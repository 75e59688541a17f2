package initiator_test

import (
	"context"
	"log/slog"
	"testing"

	"github.com/rdisk/rdisk/backstore"
	"github.com/rdisk/rdisk/blockdev"
	"github.com/rdisk/rdisk/rdma/iwarp"
	"github.com/rdisk/rdisk/scsi"
	"github.com/rdisk/rdisk/srp/initiator"
	"github.com/rdisk/rdisk/srp/target"
)

// benchDevice serves a RAM disk of size bytes through rdisk's SRP target
// and opens it with this initiator (one channel of depth 64).
func benchDevice(b *testing.B, size int64) blockdev.Device {
	disk, err := backstore.NewMem(size, 512)
	if err != nil {
		b.Fatal(err)
	}
	lu, err := scsi.NewLU(disk, scsi.LUConfig{})
	if err != nil {
		b.Fatal(err)
	}
	tg, err := target.New(target.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { tg.Close() })
	port, err := tg.AddPort(target.PortConfig{IDExt: 1, IOCGUID: 2, AllowAnyInitiator: true})
	if err != nil {
		b.Fatal(err)
	}
	if err := port.Map(0, lu); err != nil {
		b.Fatal(err)
	}
	tp, err := iwarp.New(iwarp.Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { tp.Close() })
	addr, err := tg.Listen(context.Background(), tp, "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	ip, err := iwarp.New(iwarp.Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ip.Close() })
	d, err := initiator.Open(context.Background(), ip, port.URL(addr.String()), initiator.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { d.Close() })
	return d
}

// runBench keeps qd requests of op and size bytes in flight over the first
// span bytes of d until b.N completed.
func runBench(b *testing.B, d blockdev.Device, op blockdev.Op, size, qd int, span int64) {
	c := make(chan *blockdev.Request, qd)
	reqs := make([]blockdev.Request, qd)
	for i := range reqs {
		buf, err := d.AllocBuffer(size)
		if err != nil {
			b.Fatal(err)
		}
		defer buf.Release()
		reqs[i] = blockdev.Request{Op: op, Length: size, Buf: buf, C: c}
	}
	blocks := span / int64(size)
	next := int64(0)
	submit := func(r *blockdev.Request) {
		r.Offset = (next * 7919 % blocks) * int64(size)
		next++
		if err := d.Submit(r); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	submitted := 0
	for i := range reqs {
		if submitted < b.N {
			submit(&reqs[i])
			submitted++
		}
	}
	for done := 0; done < submitted; done++ {
		r := <-c
		if r.Err != nil {
			b.Fatal(r.Err)
		}
		if submitted < b.N {
			submit(r)
			submitted++
		}
	}
}

// BenchmarkIO: reads and writes through this initiator against rdisk's SRP
// target on 127.0.0.1 (pure-Go iWARP on both ends; allocations count both
// sides).
func BenchmarkIO(b *testing.B) {
	const span = 64 << 20
	d := benchDevice(b, span)
	for _, bc := range []struct {
		name     string
		op       blockdev.Op
		size, qd int
	}{
		{"read-4k-qd32", blockdev.OpRead, 4096, 32},
		{"write-4k-qd32", blockdev.OpWrite, 4096, 32},
		{"read-4k-qd1", blockdev.OpRead, 4096, 1},
		{"read-128k-qd8", blockdev.OpRead, 128 << 10, 8},
	} {
		b.Run(bc.name, func(b *testing.B) { runBench(b, d, bc.op, bc.size, bc.qd, span) })
	}
}
