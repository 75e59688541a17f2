package iser

import (
	"fmt"
	"io"
	"net"
)

// Writer writes PDUs to a byte stream (iSCSI over TCP) with one vectored
// write per PDU: header, AHS, header digest, data segment and its padding
// and digest go out as a net.Buffers, so the data segment is never copied
// (on a *net.TCPConn the write is a single writev).
//
// A Writer is owned by one goroutine, the connection's send side; it is not
// safe for concurrent use. WritePDU does not allocate, apart from what the
// runtime's writev path does.
type Writer struct {
	w            io.Writer
	headerDigest bool
	dataDigest   bool
	hd           [DigestSize]byte
	tail         [2 * DigestSize]byte
	vec          [5][]byte
	bufs         net.Buffers
}

// NewWriter returns a Writer on w with digests off.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// SetDigests turns header and data digests on or off, as negotiated; they
// take effect from the first PDU after the final Login Response.
func (w *Writer) SetDigests(header, data bool) { w.headerDigest, w.dataDigest = header, data }

// WritePDU writes one PDU. It sets the TotalAHSLength and DataSegmentLength
// fields of hdr from ahs and data: ahs must be a whole number of padded
// AHSs (a multiple of 4 bytes, at most MaxAHSLength), data at most the
// peer's MaxRecvDataSegmentLength (the caller's limit to keep). The buffers
// are not retained after WritePDU returns.
func (w *Writer) WritePDU(hdr BHS, ahs, data []byte) error {
	if len(hdr) < BHSSize {
		return fmt.Errorf("%w: header of %d bytes", errShortBHS, len(hdr))
	}
	if len(ahs)%4 != 0 || len(ahs) > MaxAHSLength {
		return fmt.Errorf("%w: AHS area of %d bytes", errAHSLength, len(ahs))
	}
	if len(data) > MaxDataSegmentLength {
		return fmt.Errorf("%w: %d bytes", ErrDataSegmentTooLong, len(data))
	}
	hdr = hdr[:BHSSize]
	hdr.SetLengths(len(ahs), len(data))
	v := w.vec[:0]
	v = append(v, hdr)
	if len(ahs) > 0 {
		v = append(v, ahs)
	}
	if w.headerDigest {
		PutDigest(w.hd[:], HeaderDigest(hdr, ahs))
		v = append(v, w.hd[:])
	}
	if len(data) > 0 {
		v = append(v, data)
		pad := PadLength(len(data))
		clear(w.tail[:pad])
		t := pad
		if w.dataDigest {
			PutDigest(w.tail[pad:], DataDigest(data))
			t += DigestSize
		}
		if t > 0 {
			v = append(v, w.tail[:t])
		}
	}
	w.bufs = v
	_, err := w.bufs.WriteTo(w.w)
	clear(w.vec[:]) // drop references to the caller's buffers
	return err
}

// AppendPDU appends a whole PDU to dst (header, AHS, data segment and its
// padding, no digests): the form an iSER Send carries after its iSER header,
// and a convenience for tests. It sets the lengths in hdr.
func AppendPDU(dst []byte, hdr BHS, ahs, data []byte) []byte {
	hdr = hdr[:BHSSize]
	hdr.SetLengths(len(ahs), len(data))
	dst = append(dst, hdr...)
	dst = append(dst, ahs...)
	dst = append(dst, data...)
	return appendPad(dst, len(data))
}
