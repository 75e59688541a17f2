package iser

import (
	"fmt"
	"io"
)

// PDU is one received PDU: views into the caller's buffers. It is valid
// until those buffers are reused (for a Reader, until the next ReadPDU with
// the same buffers).
type PDU struct {
	// BHS is the 48-byte basic header segment.
	BHS BHS
	// AHS is the additional header segment area, TotalAHSLength bytes
	// (use NextAHS or ParseCommandAHS), empty without AHS.
	AHS []byte
	// Data is the data segment without padding, DataSegmentLength bytes.
	Data []byte
}

// Header returns the BHS and AHS as one slice when they are contiguous (as
// the Reader and ParsePDU leave them), else the BHS alone. It is the data
// segment of a Reject answering this PDU (RFC 7143 section 11.17.1).
func (p PDU) Header() []byte {
	n := len(p.AHS)
	if n == 0 || cap(p.BHS) < BHSSize+n {
		return p.BHS[:BHSSize]
	}
	whole := p.BHS[:BHSSize+n]
	if &whole[BHSSize] != &p.AHS[0] {
		return p.BHS[:BHSSize]
	}
	return whole
}

// Reader reads PDUs from a byte stream (iSCSI over TCP) into buffers the
// caller provides. Give it a buffered reader (bufio.Reader around the
// net.Conn): it reads the header, AHS, digests and padding in small pieces,
// and large data segments are read straight into the caller's buffer.
//
// A Reader is owned by one goroutine, the connection's receive side; it is
// not safe for concurrent use. ReadPDU does not allocate.
type Reader struct {
	r            io.Reader
	headerDigest bool
	dataDigest   bool
	maxRecv      int
	scratch      [2 * DigestSize]byte
}

// NewReader returns a Reader on r with digests off and the login limit of
// DefaultRecvDataSegmentLength, as every connection starts.
func NewReader(r io.Reader) *Reader {
	return &Reader{r: r, maxRecv: DefaultRecvDataSegmentLength}
}

// SetDigests turns header and data digests on or off. A connection turns
// them on for the PDU after the final Login Response, as negotiated.
func (r *Reader) SetDigests(header, data bool) { r.headerDigest, r.dataDigest = header, data }

// SetMaxRecvDataSegmentLength sets the largest data segment accepted: the
// MaxRecvDataSegmentLength this side declared (Params.MaxRecvDataSegmentLength).
func (r *Reader) SetMaxRecvDataSegmentLength(n int) { r.maxRecv = n }

// ReadPDU reads one PDU. hdr receives the BHS and the AHS (BHSSize bytes
// are enough without AHS, MaxHeaderLength always); data receives the data
// segment and must hold MaxRecvDataSegmentLength bytes (less is fine if the
// caller knows no larger segment can come).
//
// Errors: io.EOF before the first byte of a PDU, io.ErrUnexpectedEOF inside
// one, ErrHeaderDigest, ErrDataSegmentTooLong (connection must be dropped),
// and ErrDataDigest, returned with the PDU: the data was consumed, the
// stream is still in step, and the caller decides (a target sends a Reject).
func (r *Reader) ReadPDU(hdr, data []byte) (PDU, error) {
	if len(hdr) < BHSSize {
		return PDU{}, fmt.Errorf("%w: header buffer of %d bytes", errShortBuffer, len(hdr))
	}
	if _, err := io.ReadFull(r.r, hdr[:BHSSize]); err != nil {
		return PDU{}, err
	}
	h := BHS(hdr[:BHSSize])
	ahsLen := h.TotalAHSLength()
	if BHSSize+ahsLen > len(hdr) {
		return PDU{}, fmt.Errorf("%w: %d bytes of AHS, header buffer of %d", errShortBuffer, ahsLen, len(hdr))
	}
	ahs := hdr[BHSSize : BHSSize+ahsLen]
	if ahsLen > 0 {
		if _, err := io.ReadFull(r.r, ahs); err != nil {
			return PDU{}, unexpected(err)
		}
	}
	if r.headerDigest {
		if _, err := io.ReadFull(r.r, r.scratch[:DigestSize]); err != nil {
			return PDU{}, unexpected(err)
		}
		if got, want := GetDigest(r.scratch[:]), HeaderDigest(h, ahs); got != want {
			return PDU{}, fmt.Errorf("%w: got %#08x, computed %#08x (%v)", ErrHeaderDigest, got, want, h.Opcode())
		}
	}
	n := h.DataSegmentLength()
	p := PDU{BHS: h, AHS: ahs, Data: data[:0]}
	if n == 0 {
		return p, nil
	}
	if n > r.maxRecv || n > len(data) {
		return PDU{}, fmt.Errorf("%w: %d bytes (limit %d, buffer %d, %v)", ErrDataSegmentTooLong,
			n, r.maxRecv, len(data), h.Opcode())
	}
	p.Data = data[:n]
	if _, err := io.ReadFull(r.r, p.Data); err != nil {
		return PDU{}, unexpected(err)
	}
	tail := PadLength(n)
	if r.dataDigest {
		tail += DigestSize
	}
	if tail > 0 {
		if _, err := io.ReadFull(r.r, r.scratch[:tail]); err != nil {
			return PDU{}, unexpected(err)
		}
	}
	if r.dataDigest {
		pad := PadLength(n)
		if got, want := GetDigest(r.scratch[pad:]), DataDigest(p.Data); got != want {
			return p, fmt.Errorf("%w: got %#08x, computed %#08x (%v)", ErrDataDigest, got, want, h.Opcode())
		}
	}
	return p, nil
}

func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// ParsePDU splits a PDU held whole in b (an iSER receive buffer after the
// iSER header) into its parts, checking that the lengths fit in b. iSER
// carries no digests and needs no padding; padding, if present, is
// ignored. maxRecv bounds the data segment (MaxRecvDataSegmentLength).
func ParsePDU(b []byte, maxRecv int) (PDU, error) {
	h, err := ParseBHS(b)
	if err != nil {
		return PDU{}, err
	}
	ahsEnd := BHSSize + h.TotalAHSLength()
	n := h.DataSegmentLength()
	if n > maxRecv {
		return PDU{}, fmt.Errorf("%w: %d bytes (limit %d, %v)", ErrDataSegmentTooLong, n, maxRecv, h.Opcode())
	}
	if ahsEnd+n > len(b) {
		return PDU{}, fmt.Errorf("%w: header says %d bytes, have %d", errShortPDU, ahsEnd+n, len(b))
	}
	return PDU{BHS: h, AHS: b[BHSSize:ahsEnd], Data: b[ahsEnd : ahsEnd+n]}, nil
}
