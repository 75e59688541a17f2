package scsi

import (
	"testing"
)

// BenchmarkExecute measures the core's per-command cost on a RAM disk:
// 4 KiB random-ish reads and writes, one goroutine and in parallel.
func BenchmarkExecute(b *testing.B) {
	f := newFixture(b, newMem(b, 1<<16, 512), LUConfig{})
	prefill := make([]byte, 1<<20)
	for lba := uint32(0); lba < 1<<16; lba += 2048 {
		out(f.s1, rw10(OpWrite10, lba, 2048, 0), prefill)
	}
	for _, bc := range []struct {
		name  string
		write bool
	}{{"read4k", false}, {"write4k", true}} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(4096)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				buf := make([]byte, 4096)
				sense := make([]byte, SenseBufferLen)
				cdbs := make([][]byte, 64)
				for i := range cdbs {
					op := uint8(OpRead10)
					if bc.write {
						op = OpWrite10
					}
					cdbs[i] = rw10(op, uint32(i*997%8000)*8, 8, 0)
				}
				var c Command
				i := 0
				for pb.Next() {
					c = Command{CDB: cdbs[i&63], Tag: uint64(i), ExpectedLength: 4096, Sense: sense}
					if bc.write {
						c.Dir, c.DataOut = DirOut, buf
					} else {
						c.Dir, c.DataIn = DirIn, buf
					}
					f.s1.Execute(&c)
					if c.Status != StatusGood {
						b.Fatal(c.Status)
					}
					i++
				}
			})
		})
	}
}

// BenchmarkExecuteCheckCondition measures a command that fails with sense
// data (a READ beyond the capacity), which the LU's error counters count.
func BenchmarkExecuteCheckCondition(b *testing.B) {
	f := newFixture(b, newMem(b, 1<<16, 512), LUConfig{})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		buf := make([]byte, 4096)
		sense := make([]byte, SenseBufferLen)
		oob := rw10(OpRead10, 1<<16, 8, 0)
		var c Command
		for pb.Next() {
			c = Command{CDB: oob, ExpectedLength: 4096, Dir: DirIn, DataIn: buf, Sense: sense}
			f.s1.Execute(&c)
			if c.Status != StatusCheckCondition {
				b.Fatal(c.Status)
			}
		}
	})
}
