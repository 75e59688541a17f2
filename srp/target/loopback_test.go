package target

import (
	"bytes"
	"github.com/rdisk/rdisk/srp/initiator"
	"testing"

	"github.com/rdisk/rdisk/blockdev"
	"github.com/rdisk/rdisk/blockdev/blockdevtest"
)

// TestLoopbackBasic runs on a plain RAM disk: its commands execute on the
// channel's loop (inline), where the other tests' wrapped disks use the
// workers.
func TestLoopbackBasic(t *testing.T) {
	t.Parallel()
	lt := startTarget(t, Config{}, PortConfig{}, memDisk(t, 4<<20))
	d := openDev(t, lt, initiator.Config{})
	in := d.Info()
	if in.Size != 4<<20 || in.BlockSize != 512 {
		t.Fatalf("info %+v", in)
	}
	if !d.Session().Immediate() {
		t.Errorf("immediate data not negotiated")
	}
	want := randBytes(64<<10, 1)
	if err := ioAt(t, d, blockdev.OpWrite, want, 4096, 0); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(want))
	if err := ioAt(t, d, blockdev.OpRead, got, 4096, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("read back differs")
	}
}

func TestLoopbackConformance(t *testing.T) {
	t.Parallel()
	for _, pol := range []initiator.DescriptorPolicy{initiator.PolicyAuto, initiator.PolicyDirect, initiator.PolicyIndirect, initiator.PolicyExternal} {
		t.Run(pol.String(), func(t *testing.T) {
			lt := startTarget(t, Config{QueueDepth: 16}, PortConfig{}, newTestDisk(t, 4<<20))
			blockdevtest.Run(t, func(t *testing.T) blockdev.Device {
				p := newProvider(t)
				d, err := initiator.Open(testCtx(t), p, lt.port.URL(lt.addr), initiator.Config{Logger: testLogger(), Channels: 2, QueueDepth: 8, Policy: pol, MaxTransfer: 64 << 10})
				if err != nil {
					t.Fatal(err)
				}
				return d
			})
		})
	}
}
