package backstore

import (
	"fmt"

	"github.com/rdisk/rdisk/internal/units"
)

// sizeText prints a size in binary units ("64MiB"), with the exact byte
// count as well when the units round it ("1073742336 bytes (1.0GiB)").
func sizeText(n int64) string {
	s := units.FormatSize(n)
	if back, err := units.ParseSize(s); n < 0 || err != nil || back != n {
		return fmt.Sprintf("%d bytes (%s)", n, s)
	}
	return s
}

// resizeError is the error of a refused or failed Resize (or Rescan) of
// the disk called name from old to size bytes.
func resizeError(name string, old, size int64, err error) error {
	return fmt.Errorf("resizing %s from %s to %s: %w", name, sizeText(old), sizeText(size), err)
}

// checkNewSize validates the size given to Resize.
func checkNewSize(size int64, bs int) error {
	if size <= 0 || size%int64(bs) != 0 {
		return fmt.Errorf("the size is not a positive multiple of the block size %d", bs)
	}
	return nil
}

// errShrink is the cause of a refused shrink.
var errShrink = fmt.Errorf("shrinking would drop the data past the new end: %w", ErrUnsupported)
