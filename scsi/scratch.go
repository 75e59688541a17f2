package scsi

import (
	"sync/atomic"

	"github.com/rdisk/rdisk/backstore"
)

// Scratch buffers serve the commands that need media data besides the
// transport's buffers: VERIFY and COMPARE AND WRITE compare, ORWRITE merges,
// WRITE SAME replicates its block, and a read whose expected length ends
// inside a block reads that block whole. They are allocated on first use, at
// most scratchMax per LU, and reused: steady-state commands allocate
// nothing. Commands process their range in scratchSize chunks.
const (
	scratchSize = 256 << 10
	scratchMax  = 8
)

type scratchPool struct {
	free chan []byte
	made atomic.Int32
}

func (p *scratchPool) init() {
	p.free = make(chan []byte, scratchMax)
}

// get returns a scratch buffer of scratchSize bytes, aligned for direct
// I/O, waiting for one when scratchMax are in use. A command holds at most
// one at a time.
func (p *scratchPool) get() []byte {
	select {
	case b := <-p.free:
		return b
	default:
	}
	if p.made.Add(1) <= scratchMax {
		return backstore.AlignedBuffer(scratchSize, 4096)
	}
	p.made.Add(-1)
	return <-p.free
}

func (p *scratchPool) put(b []byte) { p.free <- b }
