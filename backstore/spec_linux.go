//go:build linux

package backstore

import (
	"fmt"
	"io/fs"

	"github.com/rdisk/rdisk/internal/units"
)

// Kind names a backstore implementation.
type Kind string

// Backstore kinds.
const (
	KindMem   Kind = "mem"   // Mem: sparse RAM disk
	KindFile  Kind = "file"  // File: regular file
	KindBlock Kind = "block" // Block: block device
	KindNull  Kind = "null"  // Null: discards writes, reads zeroes
)

// Spec describes a disk to open: the pure description that a configuration
// file holds, from which Open makes the live disk.
type Spec struct {
	// Kind selects the implementation.
	Kind Kind `json:"kind"`
	// Path of the file or the block device (file and block).
	Path string `json:"path,omitempty"`
	// Size in bytes: required for mem and null, and for a file with
	// Create; see FileOptions.Size.
	Size int64 `json:"size,omitempty"`
	// BlockSize in bytes; 0 means 512 (mem, null, file) or the device's
	// logical block size (block).
	BlockSize int `json:"block_size,omitempty"`
	// ReadOnly refuses writes (every kind).
	ReadOnly bool `json:"read_only,omitempty"`
	// Create a missing file (file).
	Create bool `json:"create,omitempty"`
	// Perm of a created file; 0 means 0600 (file).
	Perm fs.FileMode `json:"perm,omitempty"`
	// Direct opens a file with O_DIRECT (file).
	Direct bool `json:"direct,omitempty"`
	// Buffered opens a block device without O_DIRECT (block).
	Buffered bool `json:"buffered,omitempty"`
	// Shared opens a block device without O_EXCL (block).
	Shared bool `json:"shared,omitempty"`
	// NoURing runs a file's or block device's asynchronous operations on
	// the sync path instead of io_uring (file, block); see IOPath.
	NoURing bool `json:"no_uring,omitempty"`
}

// Open opens the disk that s describes. The caller closes it.
func Open(s Spec) (Disk, error) {
	bs := s.BlockSize
	if bs == 0 && s.Kind != KindBlock {
		bs = 512
	}
	switch s.Kind {
	case KindMem:
		m, err := NewMem(s.Size, bs)
		if err != nil {
			return nil, err
		}
		m.SetReadOnly(s.ReadOnly)
		return m, nil
	case KindNull:
		if err := checkBlockSize(bs); err != nil {
			return nil, fmt.Errorf("creating null disk: %w", err)
		}
		if s.Size <= 0 || s.Size%int64(bs) != 0 {
			return nil, fmt.Errorf("creating null disk: size %s is not a positive multiple of the block size %d", units.FormatSize(s.Size), bs)
		}
		n := NewNull(s.Size, bs)
		n.SetReadOnly(s.ReadOnly)
		return n, nil
	case KindFile:
		f, err := OpenFile(s.Path, FileOptions{
			BlockSize: bs, Size: s.Size, Create: s.Create, Perm: s.Perm, ReadOnly: s.ReadOnly, Direct: s.Direct, NoURing: s.NoURing,
		})
		if err != nil {
			return nil, err // not a typed nil in the interface
		}
		return f, nil
	case KindBlock:
		b, err := OpenBlock(s.Path, BlockOptions{BlockSize: bs, ReadOnly: s.ReadOnly, Buffered: s.Buffered, Shared: s.Shared, NoURing: s.NoURing})
		if err != nil {
			return nil, err
		}
		return b, nil
	}
	return nil, fmt.Errorf("opening disk: unknown kind %q (want mem, file, block or null)", s.Kind)
}
