package srp

import (
	"fmt"

	"github.com/rdisk/rdisk/scsi"
)

// Descriptor sizes.
const (
	DirectDescSize   = 16 // struct srp_direct_buf: VA, key, length
	IndirectHdrSize  = 20 // struct srp_indirect_buf without its list
	ImmediateHdrSize = 4  // struct srp_imm_buf: length
)

// DirectDesc is a direct data buffer descriptor: Len bytes at VA in the
// initiator's memory, reached with remote key Key.
type DirectDesc struct {
	VA  uint64
	Key uint32
	Len uint32
}

// Put writes the descriptor into the first 16 bytes of b.
func (d DirectDesc) Put(b []byte) {
	_ = b[DirectDescSize-1]
	put64(b[0:], d.VA)
	put32(b[8:], d.Key)
	put32(b[12:], d.Len)
}

// ParseDirectDesc reads a descriptor from the first 16 bytes of b.
func ParseDirectDesc(b []byte) DirectDesc {
	_ = b[DirectDescSize-1]
	return DirectDesc{VA: be64(b[0:]), Key: be32(b[8:]), Len: be32(b[12:])}
}

// PutIndirectHdr writes an indirect descriptor header: the descriptor of
// the whole table in initiator memory and the total data length.
func PutIndirectHdr(b []byte, table DirectDesc, total uint32) {
	_ = b[IndirectHdrSize-1]
	table.Put(b)
	put32(b[16:], total)
}

// FormatError is a descriptor problem found by ParseData. When Logout is
// set the target answers with SRP_T_LOGOUT and that reason (an unsupported
// format or an invalid descriptor count, as srp-r16a asks); otherwise the
// command fails with CHECK CONDITION, ILLEGAL REQUEST, INVALID FIELD IN
// COMMAND INFORMATION UNIT pointing at byte Field of the IU.
type FormatError struct {
	Logout TLogoutReason
	// LogoutSet tells whether Logout applies (TLogoutNoReason is 0).
	LogoutSet bool
	Field     int
	Msg       string
}

// Error describes the problem and what the target answers.
func (e *FormatError) Error() string {
	if e.LogoutSet {
		return fmt.Sprintf("srp: SRP_CMD: %s (%s)", e.Msg, e.Logout)
	}
	return fmt.Sprintf("srp: SRP_CMD: %s (byte %d)", e.Msg, e.Field)
}

func logoutErr(r TLogoutReason, format string, args ...any) error {
	return &FormatError{Logout: r, LogoutSet: true, Msg: fmt.Sprintf(format, args...)}
}

func fieldErr(field int, format string, args ...any) error {
	return &FormatError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// Data describes the data buffer of an SRP_CMD, as ParseData found it.
type Data struct {
	// Dir is the transfer direction: DirOut for a data-out descriptor,
	// DirIn for data-in, DirNone without one.
	Dir scsi.Dir
	// Format is the descriptor format of that direction.
	Format DescFormat
	// Length is the expected data transfer length: the direct
	// descriptor's length, the indirect TOTAL LENGTH, or the immediate
	// data length.
	Length uint32
	// Descs holds the descriptors of a direct (one) or indirect (the
	// partial table in the IU) buffer. It aliases the storage passed to
	// ParseData.
	Descs []DirectDesc
	// Table is the indirect table descriptor, and TableCount the number of
	// descriptors of the whole table (its length / 16).
	Table      DirectDesc
	TableCount int
	// External is set when the table has more descriptors than the IU
	// carries: the target must fetch Table with RDMA Read.
	External bool
	// ImmOffset and ImmLen locate immediate data in the IU.
	ImmOffset int
	ImmLen    int
}

// ParseData parses the descriptors of an SRP_CMD of which n bytes were
// received (c may be longer: a receive buffer). immOffset is the immediate
// data offset negotiated at login, 0 when immediate data was not
// negotiated. Inline descriptors are stored in descs (whose capacity bounds
// how many the target accepts, maxDescs the table size); the result's Descs
// aliases it. Problems are returned as *FormatError.
//
// The rules follow srp-r16a and Linux ib_srpt/ib_srp: only one direction
// may carry a descriptor (bidirectional commands are refused); the
// descriptor counts are those of the inline table for indirect buffers and
// are ignored for direct ones; an indirect table with more entries than the
// IU carries is external; immediate data (data-out only) must start at the
// negotiated offset, after its descriptor, and lie inside the IU.
func ParseData(c Cmd, n int, immOffset int, descs []DirectDesc, maxDescs int) (Data, error) {
	var d Data
	if n > len(c) {
		n = len(c)
	}
	if n < CmdSize+c.AddCDBLen() {
		return d, fieldErr(31, "additional CDB length %d exceeds the %d-byte IU", c.AddCDBLen(), n)
	}
	out, in := c.DataOutFmt(), c.DataInFmt()
	if out > DescImmediate {
		return d, logoutErr(TLogoutUnsupportedOutFmt, "data-out descriptor format %d", out)
	}
	if in > DescIndirect {
		return d, logoutErr(TLogoutUnsupportedInFmt, "data-in descriptor format %d", in)
	}
	if out != DescNone && in != DescNone {
		return d, fieldErr(5, "bidirectional commands are not supported (formats %s/%s)", out, in)
	}
	off := CmdSize + c.AddCDBLen()
	b := c[off:n]
	switch {
	case out != DescNone:
		d.Dir, d.Format = scsi.DirOut, out
	case in != DescNone:
		d.Dir, d.Format = scsi.DirIn, in
	default:
		return d, nil
	}
	switch d.Format {
	case DescDirect:
		if len(b) < DirectDescSize {
			return d, fieldErr(off, "direct descriptor beyond the %d-byte IU", n)
		}
		if cap(descs) < 1 {
			return d, fieldErr(off, "no room for a descriptor")
		}
		d.Descs = descs[:1]
		d.Descs[0] = ParseDirectDesc(b)
		d.Length = d.Descs[0].Len
	case DescIndirect:
		if len(b) < IndirectHdrSize {
			return d, fieldErr(off, "indirect descriptor beyond the %d-byte IU", n)
		}
		d.Table = ParseDirectDesc(b)
		d.Length = be32(b[16:])
		if d.Table.Len%DirectDescSize != 0 || d.Table.Len == 0 {
			return d, fieldErr(off+12, "indirect table length %d is not a positive multiple of %d", d.Table.Len, DirectDescSize)
		}
		d.TableCount = int(d.Table.Len / DirectDescSize)
		count, other := int(c.DataOutCount()), int(c.DataInCount())
		reason, otherReason := TLogoutInvalidOutCount, TLogoutInvalidInCount
		if d.Dir == scsi.DirIn {
			count, other = other, count
			reason, otherReason = otherReason, reason
		}
		if other != 0 {
			return d, logoutErr(otherReason, "descriptor count %d for the direction without data", other)
		}
		if count > d.TableCount {
			return d, logoutErr(reason, "%d descriptors in the IU, but the table holds %d", count, d.TableCount)
		}
		if d.TableCount > maxDescs || d.TableCount > cap(descs) {
			return d, fieldErr(off+12, "indirect table of %d descriptors, more than the %d supported", d.TableCount, min(maxDescs, cap(descs)))
		}
		if len(b) < IndirectHdrSize+count*DirectDescSize {
			return d, logoutErr(reason, "%d descriptors do not fit in the %d-byte IU", count, n)
		}
		d.External = count < d.TableCount
		d.Descs = descs[:count]
		for i := range d.Descs {
			d.Descs[i] = ParseDirectDesc(b[IndirectHdrSize+i*DirectDescSize:])
		}
		if !d.External {
			if err := checkTotal(d.Descs, d.Length, off+16); err != nil {
				return d, err
			}
		}
	case DescImmediate:
		if immOffset == 0 {
			return d, logoutErr(TLogoutUnsupportedOutFmt, "immediate data was not negotiated at login")
		}
		if len(b) < ImmediateHdrSize {
			return d, fieldErr(off, "immediate descriptor beyond the %d-byte IU", n)
		}
		d.Length = be32(b)
		if off+ImmediateHdrSize > immOffset {
			return d, fieldErr(off, "immediate descriptor at %d overlaps the data at %d", off, immOffset)
		}
		if uint64(immOffset)+uint64(d.Length) > uint64(n) {
			return d, fieldErr(off, "%d bytes of immediate data at %d do not fit in the %d-byte IU", d.Length, immOffset, n)
		}
		d.ImmOffset, d.ImmLen = immOffset, int(d.Length)
	}
	return d, nil
}

// ParseTable fills the descriptors of an external indirect table (fetched
// with RDMA Read into b) into d.Descs, which must have capacity for
// d.TableCount entries (the storage given to ParseData), and checks that
// they cover the total length.
func ParseTable(d *Data, b []byte) error {
	if len(b) < d.TableCount*DirectDescSize || cap(d.Descs) < d.TableCount {
		return fieldErr(CmdSize, "indirect table of %d descriptors in %d bytes", d.TableCount, len(b))
	}
	d.Descs = d.Descs[:d.TableCount]
	for i := range d.Descs {
		d.Descs[i] = ParseDirectDesc(b[i*DirectDescSize:])
	}
	d.External = false
	return checkTotal(d.Descs, d.Length, CmdSize)
}

// checkTotal verifies that the descriptors cover at least total bytes.
func checkTotal(descs []DirectDesc, total uint32, field int) error {
	var sum uint64
	for _, x := range descs {
		sum += uint64(x.Len)
	}
	if sum < uint64(total) {
		return fieldErr(field, "descriptors cover %d bytes, less than the total length %d", sum, total)
	}
	return nil
}
