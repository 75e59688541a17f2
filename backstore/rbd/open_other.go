//go:build !(ceph && linux)

package rbd

import (
	"fmt"
	"log/slog"

	"github.com/rdisk/rdisk/backstore"
)

// Image is an open RBD image. In this build (without the ceph build tag)
// it cannot be opened.
type Image struct{}

// Built reports whether this build can open RBD images.
func Built() bool { return false }

// Open validates cfg and returns an error saying how to get a build with
// Ceph support: this one has none.
func Open(cfg Config, log *slog.Logger) (*Image, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("opening rbd image %s: %w", cfg.Name(), ErrNotBuilt)
}

// The methods below give Image, in this build too, the method set of the
// ceph build, so that callers compile unchanged; none is reachable, since
// Open never returns an Image here.

// Name returns "POOL/IMAGE".
func (im *Image) Name() string { return "" }

// Config returns the configuration.
func (im *Image) Config() Config { return Config{} }

// BlockSize implements backstore.Disk.
func (im *Image) BlockSize() int { return 512 }

// Size implements backstore.Disk.
func (im *Image) Size() int64 { return 0 }

// ReadOnly implements backstore.Disk.
func (im *Image) ReadOnly() bool { return true }

// ReadAt implements backstore.Disk.
func (im *Image) ReadAt(p []byte, off int64) error { return ErrNotBuilt }

// WriteAt implements backstore.Disk.
func (im *Image) WriteAt(p []byte, off int64, flags backstore.WriteFlags) error { return ErrNotBuilt }

// ReadvAt implements backstore.VectoredDisk.
func (im *Image) ReadvAt(bufs [][]byte, off int64) error { return ErrNotBuilt }

// WritevAt implements backstore.VectoredDisk.
func (im *Image) WritevAt(bufs [][]byte, off int64, flags backstore.WriteFlags) error {
	return ErrNotBuilt
}

// Flush implements backstore.Disk.
func (im *Image) Flush() error { return ErrNotBuilt }

// Close implements backstore.Disk.
func (im *Image) Close() error { return ErrNotBuilt }

// Start implements backstore.AsyncDisk.
func (im *Image) Start(io *backstore.AsyncIO) error { return ErrNotBuilt }

// Discard implements backstore.Discarder.
func (im *Image) Discard(off, length int64) error { return ErrNotBuilt }

// WriteZeroes implements backstore.ZeroWriter.
func (im *Image) WriteZeroes(off, length int64, flags backstore.WriteFlags) error {
	return ErrNotBuilt
}

// CompareAndWrite writes data at off if the image holds cmp there.
func (im *Image) CompareAndWrite(cmp, data []byte, off int64) (mismatch int64, err error) {
	return -1, ErrNotBuilt
}

// CompareAndWriteMax is the longest range CompareAndWrite takes.
func (im *Image) CompareAndWriteMax() int { return 512 }

// Resize implements backstore.Resizer.
func (im *Image) Resize(size int64) error { return ErrNotBuilt }

// Rescan implements backstore.Rescanner.
func (im *Image) Rescan() error { return ErrNotBuilt }

// WatchSize implements backstore.SizeWatcher.
func (im *Image) WatchSize(changed func(size int64)) {}

// Health implements backstore.HealthReporter.
func (im *Image) Health() (backstore.Health, error) {
	return backstore.Health{Reason: ErrNotBuilt.Error()}, fmt.Errorf("%w: %w", backstore.ErrUnsupported, ErrNotBuilt)
}

// Traits implements backstore.TraitsReporter.
func (im *Image) Traits() backstore.Traits { return backstore.Traits{Waits: backstore.WaitsAlways} }

// Stats implements backstore.StatsReporter.
func (im *Image) Stats() backstore.Stats { return backstore.Stats{} }

// ClientAddress returns this client's address as the OSDs see it.
func (im *Image) ClientAddress() (string, error) { return "", ErrNotBuilt }
