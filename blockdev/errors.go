package blockdev

import "errors"

// Sentinel errors. Devices return them, or errors that match them with
// errors.Is (a protocol status error matches the sentinel of its class), so
// frontends can map them to their own codes (EIO, EINVAL, ENOSPC...).
const (
	// ErrClosed: the device was closed, or its connection failed for good.
	ErrClosed = errorString("blockdev: device closed")
	// ErrInvalid: the request is malformed (unknown operation).
	ErrInvalid = errorString("blockdev: invalid request")
	// ErrAlignment: offset or length is not a positive multiple of the
	// block size.
	ErrAlignment = errorString("blockdev: offset or length not a multiple of the block size")
	// ErrRange: the request reaches past the end of the device.
	ErrRange = errorString("blockdev: request beyond the end of the device")
	// ErrTooLarge: the length exceeds MaxTransfer (Read, Write) or
	// MaxZeroes (Discard, WriteZeroes).
	ErrTooLarge = errorString("blockdev: request larger than the device's transfer limit")
	// ErrBuffer: the buffer is missing, from another device, released, or
	// too small for the request.
	ErrBuffer = errorString("blockdev: bad buffer")
	// ErrUnsupported: the device does not support the operation.
	ErrUnsupported = errorString("blockdev: operation not supported")
	// ErrReadOnly: the device is read-only.
	ErrReadOnly = errorString("blockdev: device is read-only")
	// ErrIO: the device reported a media or data error.
	ErrIO = errorString("blockdev: I/O error")
)

type errorString string

func (e errorString) Error() string { return string(e) }

// IsRequestError tells whether an error Submit returned is about the
// request itself (malformed, misaligned, out of range, too large, bad
// buffer, unsupported, read-only). By the Device contract every other
// Submit error means the device is closed or failed, whether or not it
// wraps ErrClosed: a session or multipath layer retries the request on
// another connection or path.
func IsRequestError(err error) bool {
	for _, e := range []error{ErrInvalid, ErrAlignment, ErrRange, ErrTooLarge, ErrBuffer, ErrUnsupported, ErrReadOnly} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
