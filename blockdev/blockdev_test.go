package blockdev_test

import (
	"errors"
	"testing"

	"github.com/rdisk/rdisk/blockdev"
	"github.com/rdisk/rdisk/blockdev/blockdevtest"
)

type buf []byte

func (b buf) Bytes() []byte  { return b }
func (b buf) Release() error { return nil }

func TestCheck(t *testing.T) {
	t.Parallel()
	info := blockdev.Info{BlockSize: 512, Size: 1 << 20, Queues: 1, QueueDepth: 1, MaxTransfer: 8192, MaxZeroes: 1 << 20,
		Caps: blockdev.CapDiscard}
	ro := info
	ro.Caps |= blockdev.CapReadOnly
	b := buf(make([]byte, 8192))
	cases := []struct {
		name string
		info *blockdev.Info
		r    blockdev.Request
		want error
	}{
		{"read ok", &info, blockdev.Request{Op: blockdev.OpRead, Offset: 512, Length: 1024, Buf: b}, nil},
		{"flush ignores fields", &info, blockdev.Request{Op: blockdev.OpFlush, Offset: 3, Length: -1}, nil},
		{"unknown op", &info, blockdev.Request{Op: 99}, blockdev.ErrInvalid},
		{"negative offset", &info, blockdev.Request{Op: blockdev.OpRead, Offset: -512, Length: 512, Buf: b}, blockdev.ErrAlignment},
		{"offset overflow", &info, blockdev.Request{Op: blockdev.OpRead, Offset: 1<<63 - 511, Length: 512, Buf: b}, blockdev.ErrAlignment},
		{"huge offset", &info, blockdev.Request{Op: blockdev.OpRead, Offset: 1 << 62, Length: 512, Buf: b}, blockdev.ErrRange},
		{"last block", &info, blockdev.Request{Op: blockdev.OpRead, Offset: 1<<20 - 512, Length: 512, Buf: b}, nil},
		{"too large", &info, blockdev.Request{Op: blockdev.OpWrite, Length: 8704, Buf: b}, blockdev.ErrTooLarge},
		{"negative buffer offset", &info, blockdev.Request{Op: blockdev.OpWrite, Length: 512, Buf: b, BufOff: -1}, blockdev.ErrBuffer},
		{"write zeroes unsupported", &info, blockdev.Request{Op: blockdev.OpWriteZeroes, Length: 512}, blockdev.ErrUnsupported},
		{"discard whole device", &info, blockdev.Request{Op: blockdev.OpDiscard, Length: 1 << 20}, nil},
		{"read-only write", &ro, blockdev.Request{Op: blockdev.OpWrite, Length: 512, Buf: b}, blockdev.ErrReadOnly},
		{"read-only discard", &ro, blockdev.Request{Op: blockdev.OpDiscard, Length: 512}, blockdev.ErrReadOnly},
		{"read-only read", &ro, blockdev.Request{Op: blockdev.OpRead, Length: 512, Buf: b}, nil},
	}
	for _, c := range cases {
		if err := blockdev.Check(c.info, &c.r); !errors.Is(err, c.want) || (c.want == nil && err != nil) {
			t.Errorf("%s: Check = %v, want %v", c.name, err, c.want)
		}
	}
}

func TestHelpersUnaligned(t *testing.T) {
	t.Parallel()
	d, err := blockdevtest.NewMem(blockdevtest.MemConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, err := blockdev.WriteAt(d, make([]byte, 100), 0); !errors.Is(err, blockdev.ErrAlignment) {
		t.Errorf("WriteAt of 100 bytes: %v, want ErrAlignment", err)
	}
	if n, err := blockdev.ReadAt(d, nil, 0); n != 0 || err != nil {
		t.Errorf("ReadAt of nothing: %d, %v", n, err)
	}
}
