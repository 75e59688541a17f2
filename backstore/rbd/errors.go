package rbd

import (
	"strconv"
	"syscall"

	"github.com/rdisk/rdisk/backstore"
)

// constError is the type of the package's constant sentinel errors.
type constError string

func (e constError) Error() string { return string(e) }

// ErrNotBuilt is returned by Open in a build without Ceph support (the
// default build: pure Go, no cgo).
const ErrNotBuilt constError = "rbd: this rdisk was built without Ceph RBD support; " +
	"install librbd-dev and librados-dev (Debian/Ubuntu: apt-get install librbd-dev librados-dev) " +
	"and build with: CGO_ENABLED=1 go build -tags ceph,pacific ./cmd/rdisk"

// ErrLockFeature is returned by Open in lock mode shared when the image has
// the exclusive-lock feature.
const ErrLockFeature constError = "rbd: the image has the exclusive-lock feature"

// ErrMiscompare is matched by the error of a CompareAndWrite whose compare
// buffer differs from the image (a *MiscompareError).
const ErrMiscompare constError = "rbd: compare and write: the data differs"

// errnoEBLOCKLISTED is Ceph's EBLOCKLISTED: ESHUTDOWN on Linux.
const errnoEBLOCKLISTED = syscall.ESHUTDOWN

// Error is a failed librbd or librados call. errors.Is matches both the
// backstore sentinel it maps to (ErrNoSpace, ErrTimeout, ErrFenced,
// ErrReadOnly) and the errno.
type Error struct {
	Step  string        // what failed: "read", "write", "rbd_open", ...
	Image string        // POOL/IMAGE
	Off   int64         // byte offset, or -1
	Len   int64         // byte length (I/O)
	Errno syscall.Errno // the positive errno librbd returned negated
}

// Error describes the failure.
func (e *Error) Error() string {
	b := make([]byte, 0, 128)
	b = append(b, "rbd "...)
	b = append(b, e.Image...)
	b = append(b, ": "...)
	b = append(b, e.Step...)
	if e.Off >= 0 {
		b = append(b, " of "...)
		b = strconv.AppendInt(b, e.Len, 10)
		b = append(b, " bytes at offset "...)
		b = strconv.AppendInt(b, e.Off, 10)
	}
	b = append(b, ": "...)
	if s := sentinel(e.Errno); s != nil {
		b = append(b, s.Error()...)
		b = append(b, " ("...)
		b = append(b, e.Errno.Error()...)
		b = append(b, ')')
	} else {
		b = append(b, e.Errno.Error()...)
	}
	return string(b)
}

// Unwrap returns the sentinel (when there is one) and the errno.
func (e *Error) Unwrap() []error {
	if s := sentinel(e.Errno); s != nil {
		return []error{s, e.Errno}
	}
	return []error{e.Errno}
}

// sentinel maps an errno to the backstore sentinel error, or nil.
func sentinel(errno syscall.Errno) error {
	switch errno {
	case syscall.ENOSPC, syscall.EDQUOT:
		return backstore.ErrNoSpace
	case syscall.ETIMEDOUT:
		return backstore.ErrTimeout
	case errnoEBLOCKLISTED:
		return backstore.ErrFenced
	case syscall.EROFS:
		return backstore.ErrReadOnly
	}
	return nil
}

// errorOf turns librbd's negative return r of step into an *Error (nil for
// r >= 0).
func errorOf(step, image string, off, n int64, r int64) error {
	if r >= 0 {
		return nil
	}
	return &Error{Step: step, Image: image, Off: off, Len: n, Errno: syscall.Errno(-r)}
}
