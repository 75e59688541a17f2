package initiator_test

import (
	"context"
	"log/slog"
	"net"
	"strconv"
	"testing"

	"github.com/rdisk/rdisk/backstore"
	"github.com/rdisk/rdisk/blockdev"
	"github.com/rdisk/rdisk/iser"
	"github.com/rdisk/rdisk/iser/initiator"
	"github.com/rdisk/rdisk/iser/target"
	"github.com/rdisk/rdisk/rdma/iwarp"
)

// benchDevice serves a RAM disk of size bytes through rdisk's iSCSI target
// and opens it with this initiator over tr.
func benchDevice(b *testing.B, tr iser.Transport, size int64) blockdev.Device {
	tp, err := iwarp.New(iwarp.Config{})
	if err != nil {
		b.Fatal(err)
	}
	disk, err := backstore.NewMem(size, 512)
	if err != nil {
		b.Fatal(err)
	}
	tg, err := target.New(target.Config{
		Targets:  []target.TargetConfig{{Name: testIQN, LUNs: []target.LUNConfig{{LUN: 0, Disk: disk}}}},
		Provider: tp, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- tg.Serve(context.Background(), ln) }()
	b.Cleanup(func() {
		tg.Close()
		<-done
		tp.Close()
	})
	ip, err := iwarp.New(iwarp.Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ip.Close() })
	h, p, _ := net.SplitHostPort(ln.Addr().String())
	port, _ := strconv.Atoi(p)
	d, err := initiator.Open(context.Background(), initiator.URL{Transport: tr, Host: h, Port: port, Target: testIQN},
		initiator.Config{InitiatorName: testInitiator, Provider: ip, Logger: slog.New(slog.DiscardHandler)})
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

// BenchmarkIO: reads and writes through this initiator against rdisk's
// iSCSI target on 127.0.0.1, over iSCSI/TCP and iSER (pure-Go iWARP on both
// ends; allocations count both sides).
func BenchmarkIO(b *testing.B) {
	const span = 64 << 20
	for _, x := range transports {
		b.Run(x.name, func(b *testing.B) {
			d := benchDevice(b, x.tr, span)
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
		})
	}
}
