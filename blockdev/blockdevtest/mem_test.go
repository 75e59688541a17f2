package blockdevtest

import (
	"testing"

	"github.com/rdisk/rdisk/blockdev"
)

func TestMemConformance(t *testing.T) {
	t.Parallel()
	Run(t, func(t *testing.T) blockdev.Device {
		d, err := NewMem(MemConfig{Size: 4 << 20, Queues: 2, QueueDepth: 8, MaxTransfer: 64 << 10})
		if err != nil {
			t.Fatal(err)
		}
		return d
	})
}

func TestMemNoZeroes(t *testing.T) {
	t.Parallel()
	Run(t, func(t *testing.T) blockdev.Device {
		d, err := NewMem(MemConfig{BlockSize: 4096, Size: 4 << 20, Caps: blockdev.CapFlush})
		if err != nil {
			t.Fatal(err)
		}
		return d
	})
}
