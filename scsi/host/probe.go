package host

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/rdisk/rdisk/blockdev"
	"github.com/rdisk/rdisk/scsi"
)

// Runner runs one SCSI command synchronously with plain memory (the
// transport registers it for the command's duration). The SRP and iSCSI
// initiator sessions implement it; the probe and the helpers below use
// nothing else.
type Runner interface {
	// RunSCSI sends c and waits for its status. It returns an error only
	// when the command did not complete (transport failure, ctx done);
	// the SCSI outcome is in c.Status, c.Sense and c.Resid.
	RunSCSI(ctx context.Context, c *Command) error
}

// Command is one SCSI command for a Runner.
type Command struct {
	LUN uint64
	// CDB is the command descriptor block (at most 16 bytes).
	CDB []byte
	// Dir and Data are the transfer: len(Data) is the expected length.
	Dir  scsi.Dir
	Data []byte

	// Outcome, set by the Runner.
	Status scsi.Status
	// Sense is the sense data of a CHECK CONDITION.
	Sense []byte
	// Resid is the data-in the target did not send (underflow residual).
	Resid uint32
}

// DataIn returns the data-in that arrived: Data without the residual.
func (c *Command) DataIn() []byte {
	return c.Data[:len(c.Data)-int(min(uint64(c.Resid), uint64(len(c.Data))))]
}

// Do runs c through r, sending it again while Retry says so (after a short
// pause for BUSY and TASK SET FULL). It returns nil on GOOD or CONDITION
// MET, a *StatusError for another status, or r's error wrapped with the
// command's name.
func Do(ctx context.Context, r Runner, c *Command) error { return do(ctx, r, c, nil) }

// do is Do, calling onUA (when set) with each unit attention it is about
// to retry through, before the command is sent again.
func do(ctx context.Context, r Runner, c *Command, onUA func(UnitAttention)) error {
	name := CommandName(c.CDB)
	for try := 0; ; try++ {
		c.Status, c.Sense, c.Resid = scsi.StatusGood, nil, 0
		if err := r.RunSCSI(ctx, c); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		switch c.Status {
		case scsi.StatusGood, scsi.StatusConditionMet:
			return nil
		}
		if !Retry(c.Status, c.Sense, try) {
			return NewStatusError("", name, c.Status, c.Sense)
		}
		if onUA != nil {
			if ua := ParseUnitAttention(c.Status, c.Sense); ua != NoUnitAttention {
				onUA(ua)
			}
		}
		if c.Status != scsi.StatusCheckCondition {
			t := time.NewTimer(time.Duration(1<<try) * 10 * time.Millisecond)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return fmt.Errorf("%s: %w", name, ctx.Err())
			}
		}
	}
}

// standby reports whether err is a command refused with TARGET PORT IN
// STANDBY STATE.
func standby(err error) bool {
	var se *StatusError
	return errors.As(err, &se) && se.HasSense && se.Parsed.ASC == scsi.ASCALUAStandby
}

// optional turns the failure of an optional command into "not reported":
// a CHECK CONDITION (a VPD page or mode page the LU does not have) or data
// that does not parse as the page. Transport errors stay errors.
func optional(err error) error {
	var se *StatusError
	if errors.As(err, &se) || errors.Is(err, ErrShortData) || errors.Is(err, ErrPageCode) {
		return nil
	}
	return err
}

// TestUnitReady runs TEST UNIT READY on lun; Do's retries clear the unit
// attentions a new I_T nexus reports first.
func TestUnitReady(ctx context.Context, r Runner, lun uint64) error {
	return Do(ctx, r, &Command{LUN: lun, CDB: []byte{scsi.OpTestUnitReady, 0, 0, 0, 0, 0}})
}

// Inquiry returns the standard INQUIRY data of lun.
func Inquiry(ctx context.Context, r Runner, lun uint64) (InquiryData, error) {
	c := &Command{LUN: lun, CDB: []byte{scsi.OpInquiry, 0, 0, 0, InquiryLen, 0}, Dir: scsi.DirIn, Data: make([]byte, InquiryLen)}
	if err := Do(ctx, r, c); err != nil {
		return InquiryData{}, err
	}
	return ParseInquiry(c.DataIn())
}

// readVPD returns VPD page code of lun, n bytes asked for.
func readVPD(ctx context.Context, r Runner, lun uint64, code uint8, n int) ([]byte, error) {
	cdb := []byte{scsi.OpInquiry, 0x01, code, 0, 0, 0}
	binary.BigEndian.PutUint16(cdb[3:5], uint16(n))
	c := &Command{LUN: lun, CDB: cdb, Dir: scsi.DirIn, Data: make([]byte, n)}
	if err := Do(ctx, r, c); err != nil {
		return nil, err
	}
	return c.DataIn(), nil
}

// ReadBlockLimits returns the block limits VPD page (B0h) of lun.
func ReadBlockLimits(ctx context.Context, r Runner, lun uint64) (BlockLimits, error) {
	b, err := readVPD(ctx, r, lun, vpdBlockLimits, BlockLimitsLen)
	if err != nil {
		return BlockLimits{}, err
	}
	return ParseBlockLimits(b)
}

// ReadProvisioning returns the logical block provisioning VPD page (B2h)
// of lun.
func ReadProvisioning(ctx context.Context, r Runner, lun uint64) (Provisioning, error) {
	b, err := readVPD(ctx, r, lun, vpdProvisioning, ProvisioningLen)
	if err != nil {
		return Provisioning{}, err
	}
	return ParseProvisioning(b)
}

// ReadCapacity returns the READ CAPACITY(16) data of lun.
func ReadCapacity(ctx context.Context, r Runner, lun uint64) (Capacity, error) {
	cdb := make([]byte, 16)
	cdb[0], cdb[1] = scsi.OpServiceActionIn16, scsi.SAReadCapacity16
	binary.BigEndian.PutUint32(cdb[10:14], ReadCapacity16Len)
	c := &Command{LUN: lun, CDB: cdb, Dir: scsi.DirIn, Data: make([]byte, ReadCapacity16Len)}
	if err := Do(ctx, r, c); err != nil {
		return Capacity{}, err
	}
	return ParseReadCapacity16(c.DataIn())
}

// ModeSense returns the device-specific parameter of lun's mode parameter
// header: MODE SENSE(6) of all pages with DBD set, only the header asked
// for.
func ModeSense(ctx context.Context, r Runner, lun uint64) (ModeHeader, error) {
	c := &Command{LUN: lun, CDB: []byte{scsi.OpModeSense6, 0x08, 0x3f, 0, ModeSense6Len, 0}, Dir: scsi.DirIn,
		Data: make([]byte, ModeSense6Len)}
	if err := Do(ctx, r, c); err != nil {
		return ModeHeader{}, err
	}
	return ParseModeSense6(c.DataIn())
}

// maxReportLUNs bounds the REPORT LUNS allocation (16384 LUNs: what flat
// space addressing reaches).
const maxReportLUNs = 8 + 8*16384

// ReportLUNs returns the LUN numbers the target reports (REPORT LUNS,
// SELECT REPORT 0), asking again with a larger allocation when the list
// did not fit.
func ReportLUNs(ctx context.Context, r Runner) ([]uint64, error) {
	alloc := 8 + 8*256
	for {
		cdb := make([]byte, 12)
		cdb[0] = scsi.OpReportLUNs
		binary.BigEndian.PutUint32(cdb[6:10], uint32(alloc))
		c := &Command{CDB: cdb, Dir: scsi.DirIn, Data: make([]byte, alloc)}
		if err := Do(ctx, r, c); err != nil {
			return nil, err
		}
		luns, n, err := ParseReportLUNs(c.DataIn())
		if err != nil {
			return nil, err
		}
		if 8+n > alloc && alloc < maxReportLUNs {
			alloc = min(8+n, maxReportLUNs)
			continue
		}
		return luns, nil
	}
}

// Probe opens LUN lun for block I/O and describes it (Describe), with
// maxTransfer the transport's largest data transfer in bytes. Its steps:
//
//  1. TEST UNIT READY, retried through the unit attentions of the new
//     nexus (power on, reset, LUNs changed).
//  2. INQUIRY: the LUN must hold a connected direct-access block device
//     (peripheral qualifier 0, device type 0).
//  3. READ CAPACITY(16): block size, capacity, LBPME.
//  4. The block limits VPD page (B0h), optional.
//  5. With LBPME, the logical block provisioning VPD page (B2h), optional.
//  6. MODE SENSE(6) of the header (WP, DPOFUA), optional.
//
// An optional step that ends in CHECK CONDITION, or returns data that does
// not parse, counts as "not reported"; a transport failure fails the probe. Errors name the LUN and the step.
func Probe(ctx context.Context, r Runner, lun uint64, maxTransfer int) (LU, error) {
	fail := func(err error) (LU, error) { return LU{}, fmt.Errorf("LUN %d: %w", lun, err) }
	if err := TestUnitReady(ctx, r, lun); err != nil {
		// A path in ALUA standby refuses TEST UNIT READY (04h/0Bh) but
		// answers the probe's other commands (SPC-5 5.16.2.4.4): the LU
		// is there, as sd goes on after such a NOT READY.
		if st, ok := statusAccess(err); !ok || st != blockdev.AccessInaccessible || !standby(err) {
			return fail(err)
		}
	}
	var p Pages
	var err error
	if p.Inquiry, err = Inquiry(ctx, r, lun); err != nil {
		return fail(err)
	}
	if p.Inquiry.PeripheralQualifier != 0 || p.Inquiry.DeviceType != 0 {
		return fail(fmt.Errorf("%s: peripheral qualifier %d, device type %#x: %w", NameInquiry,
			p.Inquiry.PeripheralQualifier, p.Inquiry.DeviceType, ErrNotDisk))
	}
	if p.Capacity, err = ReadCapacity(ctx, r, lun); err != nil {
		return fail(err)
	}
	if l, err := ReadBlockLimits(ctx, r, lun); err == nil {
		p.Limits = &l
	} else if err = optional(err); err != nil {
		return fail(err)
	}
	if p.Capacity.LBPME {
		if v, err := ReadProvisioning(ctx, r, lun); err == nil {
			p.Provisioning = &v
		} else if err = optional(err); err != nil {
			return fail(err)
		}
	}
	if m, err := ModeSense(ctx, r, lun); err == nil {
		p.Mode = &m
	} else if err = optional(err); err != nil {
		return fail(err)
	}
	lu, err := Describe(lun, p, maxTransfer)
	if err != nil {
		return fail(err)
	}
	return lu, nil
}
