package host

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdisk/rdisk/blockdev"
	"github.com/rdisk/rdisk/scsi"
)

// This file is the initiator's side of ALUA (SPC-5 5.16): what Linux's
// scsi_dh_alua does. A path (an I_T nexus to an LU) learns its relative
// target port and target port group from VPD page 83h, the groups' states
// from REPORT TARGET PORT GROUPS, and keeps its own group's state as a
// blockdev.AccessState; it looks again after ASYMMETRIC ACCESS STATE
// CHANGED (2Ah/06h), IMPLICIT ASYMMETRIC ACCESS STATE TRANSITION FAILED
// (2Ah/07h) and a command refused with NOT READY 04h/0Ah, 0Bh, 0Ch or 12h.

// VPD page and command codes.
const (
	vpdDeviceID = 0x83
	// DeviceIDLen is the VPD page 83h allocation length the path asks for.
	DeviceIDLen = 512
	// RTPGLen is the first REPORT TARGET PORT GROUPS allocation length
	// (larger answers are asked for again, up to maxRTPGLen).
	RTPGLen    = 4096
	maxRTPGLen = 1 << 16
)

// Names of the ALUA commands, as errors show them.
const (
	NameDeviceID = "INQUIRY (device identification VPD page)"
	NameRTPG     = "REPORT TARGET PORT GROUPS"
)

// DeviceID is what VPD page 83h (SPC-5 7.7.6) identifies: the LU's
// designators and the target port the page came through.
type DeviceID struct {
	// NAA, EUI64 and T10 are the LU's designators of those types
	// (association 00b), nil when absent; Name its SCSI name string.
	NAA, EUI64, T10 []byte
	Name            string
	// RelativeTargetPort (designator type 4) and PortGroup (type 5) of
	// the target port, valid when HasRelativePort / HasPortGroup.
	RelativeTargetPort uint16
	HasRelativePort    bool
	PortGroup          uint16
	HasPortGroup       bool
}

// DiskID returns the LU's identity for blockdev.Identifier: "naa." and the
// NAA designator in hex, else "eui." and the EUI-64, else "t10." and the
// T10 vendor ID designator, else the SCSI name string; "" when the page
// has none of them.
func (d DeviceID) DiskID() string {
	switch {
	case len(d.NAA) > 0:
		return "naa." + hex.EncodeToString(d.NAA)
	case len(d.EUI64) > 0:
		return "eui." + hex.EncodeToString(d.EUI64)
	case len(d.T10) > 0:
		return "t10." + strings.TrimRight(string(d.T10), " \x00")
	}
	return d.Name
}

// ParseDeviceID decodes VPD page 83h: the designation descriptors (SPC-5
// table 600: code set, PIV, association, designator type, length). The
// first designator of each kind counts; truncated ones are ignored.
func ParseDeviceID(b []byte) (DeviceID, error) {
	var d DeviceID
	if len(b) < 4 {
		return d, fmt.Errorf("%s: %d bytes: %w", NameDeviceID, len(b), ErrShortData)
	}
	if b[1] != vpdDeviceID {
		return d, fmt.Errorf("%s: page %02xh: %w", NameDeviceID, b[1], ErrPageCode)
	}
	end := min(len(b), 4+int(binary.BigEndian.Uint16(b[2:4])))
	for p := 4; p+4 <= end; {
		n := int(b[p+3])
		if p+4+n > end {
			break
		}
		v := b[p+4 : p+4+n]
		assoc, typ := b[p+1]>>4&3, b[p+1]&0x0f
		switch {
		case assoc == 0 && typ == 3 && d.NAA == nil && n > 0:
			d.NAA = append([]byte(nil), v...)
		case assoc == 0 && typ == 2 && d.EUI64 == nil && n > 0:
			d.EUI64 = append([]byte(nil), v...)
		case assoc == 0 && typ == 1 && d.T10 == nil && n > 0:
			d.T10 = append([]byte(nil), v...)
		case assoc == 0 && typ == 8 && d.Name == "":
			d.Name = strings.TrimRight(string(v), "\x00")
		case assoc == 1 && typ == 4 && !d.HasRelativePort && n >= 4:
			d.RelativeTargetPort, d.HasRelativePort = binary.BigEndian.Uint16(v[2:4]), true
		case assoc == 1 && typ == 5 && !d.HasPortGroup && n >= 4:
			d.PortGroup, d.HasPortGroup = binary.BigEndian.Uint16(v[2:4]), true
		}
		p += 4 + n
	}
	return d, nil
}

// ReadDeviceID reads and decodes VPD page 83h of lun.
func ReadDeviceID(ctx context.Context, r Runner, lun uint64) (DeviceID, error) {
	b, err := readVPD(ctx, r, lun, vpdDeviceID, DeviceIDLen)
	if err != nil {
		return DeviceID{}, err
	}
	return ParseDeviceID(b)
}

// PortGroup is one target port group descriptor of REPORT TARGET PORT
// GROUPS (SPC-5 table 163).
type PortGroup struct {
	ID        uint16
	State     scsi.ALUAState
	Preferred bool
	// Supported is the supported states byte (T_SUP O_SUP LBD_SUP U_SUP
	// S_SUP AN_SUP AO_SUP); Status the status code (02h: altered by an
	// implicit transition).
	Supported uint8
	Status    uint8
	// Ports are the relative target port identifiers of the group.
	Ports []uint16
}

// TargetPortGroups is REPORT TARGET PORT GROUPS parameter data.
type TargetPortGroups struct {
	// Extended is set for the extended header (format type 001b), which
	// carries ImplicitTransitionSecs.
	Extended               bool
	ImplicitTransitionSecs uint8
	Groups                 []PortGroup
	// Length is the size of the whole answer (RETURN DATA LENGTH + 4):
	// more than was parsed when the allocation length cut it.
	Length uint64
}

// ParseTargetPortGroups decodes REPORT TARGET PORT GROUPS parameter data in
// either format (SPC-5 tables 161 and 162; RETURN DATA LENGTH counts the
// bytes after itself, as Linux's alua_rtpg reads it). A descriptor cut by
// the end of the data is left out.
func ParseTargetPortGroups(b []byte) (TargetPortGroups, error) {
	var t TargetPortGroups
	if len(b) < 4 {
		return t, fmt.Errorf("%s: %d bytes: %w", NameRTPG, len(b), ErrShortData)
	}
	rdl := uint64(binary.BigEndian.Uint32(b[0:4]))
	t.Length = 4 + rdl
	end := int(min(t.Length, uint64(len(b))))
	p := 4
	if len(b) >= 8 && b[4]&0x70 == 0x10 {
		t.Extended, t.ImplicitTransitionSecs = true, b[5]
		p = 8
		// LIO's target_emulate_report_target_port_groups counts only
		// the descriptors in RETURN DATA LENGTH, leaving out bytes 4-7
		// of the extended header: take the descriptors that arrived
		// up to 8+rdl.
		end = int(min(8+rdl, uint64(len(b))))
	}
	for p+8 <= end {
		n := int(b[p+7])
		if p+8+4*n > end {
			break
		}
		g := PortGroup{ID: binary.BigEndian.Uint16(b[p+2 : p+4]), State: scsi.ALUAState(b[p] & 0x0f), Preferred: b[p]&0x80 != 0,
			Supported: b[p+1], Status: b[p+5], Ports: make([]uint16, n)}
		for i := range n {
			g.Ports[i] = binary.BigEndian.Uint16(b[p+8+4*i+2:])
		}
		t.Groups = append(t.Groups, g)
		p += 8 + 4*n
	}
	return t, nil
}

// ReadTargetPortGroups runs REPORT TARGET PORT GROUPS on lun, asking for the
// extended header first and for the length format when the target refuses
// that with ILLEGAL REQUEST (as scsi_dh_alua's ALUA_RTPG_EXT_HDR_UNSUPP),
// and again with a larger allocation when the answer did not fit.
func ReadTargetPortGroups(ctx context.Context, r Runner, lun uint64) (TargetPortGroups, error) {
	alloc := RTPGLen
	ext := true
	for {
		cdb := []byte{scsi.OpMaintenanceIn, scsi.SAReportTargetPortGroup, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
		if ext {
			cdb[1] |= 0x20
		}
		binary.BigEndian.PutUint32(cdb[6:10], uint32(alloc))
		c := &Command{LUN: lun, CDB: cdb, Dir: scsi.DirIn, Data: make([]byte, alloc)}
		if err := Do(ctx, r, c); err != nil {
			var se *StatusError
			if ext && errors.As(err, &se) && se.HasSense && se.Parsed.Key == scsi.KeyIllegalRequest &&
				se.Parsed.ASC == scsi.ASCInvalidFieldInCDB {
				ext = false
				continue
			}
			return TargetPortGroups{}, err
		}
		in := c.DataIn()
		t, err := ParseTargetPortGroups(in)
		if err != nil {
			return t, err
		}
		used := 8
		for _, g := range t.Groups {
			used += 8 + 4*len(g.Ports)
		}
		if ext && t.Extended && len(in) < alloc && used < len(in) {
			// Bytes left that hold no whole descriptor, in a transfer
			// our allocation did not cut: LIO
			// (target_emulate_report_target_port_groups) counts only
			// the descriptors in RETURN DATA LENGTH and, in the
			// extended format too, transfers that many bytes + 4, so
			// the last 4 (the last group's last port) never come. The
			// length format's transfer is whole: ask for it.
			ext = false
			continue
		}
		if t.Length > uint64(alloc) && alloc < maxRTPGLen {
			alloc = int(min(t.Length, maxRTPGLen))
			continue
		}
		return t, nil
	}
}

// AccessState maps an asymmetric access state to the blockdev path state:
// active/optimized and active/non-optimized to themselves (LBA dependent
// to non-optimized: some LBAs are served), standby and unavailable to
// inaccessible, offline to persistent loss, transitioning to
// transitioning; reserved values to unknown.
func AccessState(st scsi.ALUAState) blockdev.AccessState {
	switch st {
	case scsi.ALUAActiveOptimized:
		return blockdev.AccessOptimized
	case scsi.ALUAActiveNonOptimized, 0x4:
		return blockdev.AccessNonOptimized
	case scsi.ALUAStandby, scsi.ALUAUnavailable:
		return blockdev.AccessInaccessible
	case scsi.ALUAOffline:
		return blockdev.AccessPersistentLoss
	case scsi.ALUATransitioning:
		return blockdev.AccessTransitioning
	}
	return blockdev.AccessUnknown
}

// SenseAccessState tells whether a command that completed with status st
// and sense data sense was refused for its path's asymmetric access state,
// and which: NOT READY with ASYMMETRIC ACCESS STATE TRANSITION (04h/0Ah:
// transitioning), TARGET PORT IN STANDBY STATE (04h/0Bh) or IN
// UNAVAILABLE STATE (04h/0Ch: inaccessible), or LIO's offline 04h/12h
// (persistent loss). It does not allocate.
func SenseAccessState(st scsi.Status, sense []byte) (blockdev.AccessState, bool) {
	if st != scsi.StatusCheckCondition {
		return blockdev.AccessUnknown, false
	}
	s, err := scsi.ParseSense(sense)
	if err != nil || s.Key != scsi.KeyNotReady {
		return blockdev.AccessUnknown, false
	}
	switch s.ASC {
	case scsi.ASCALUATransition:
		return blockdev.AccessTransitioning, true
	case scsi.ASCALUAStandby, scsi.ASCALUAUnavailable:
		return blockdev.AccessInaccessible, true
	case scsi.ASCALUAOffline:
		return blockdev.AccessPersistentLoss, true
	}
	return blockdev.AccessUnknown, false
}

// Path is the ALUA view of one path to a logical unit: the LU's identity
// (DiskID), the target port and group the path goes through, and the
// group's access state, kept current by Refresh. Transports keep one per
// open device and call Failed for each command that ends in CHECK
// CONDITION and UnitAttention for each unit attention; both are cheap and
// do not allocate unless the state must be read again (which happens on
// a goroutine of its own). It is safe for concurrent use.
type Path struct {
	r    Runner
	lun  uint64
	tpgs uint8 // TPGS of the standard INQUIRY data: 0 without ALUA
	log  *slog.Logger

	state   atomic.Uint32 // blockdev.AccessState
	alua    atomic.Uint32 // scsi.ALUAState, 0xff when not known
	id      atomic.Pointer[DeviceID]
	mu      sync.Mutex // orders Refresh calls
	pending atomic.Bool
	closed  atomic.Bool
}

// NewPath reads the identity of LUN lun through r (VPD page 83h, optional:
// a CHECK CONDITION leaves it empty) and, when the INQUIRY data inq says
// the LU supports ALUA (TPGS != 0), the path's access state (REPORT TARGET
// PORT GROUPS). A state the target refuses to report through this path
// (an offline port) is taken from the refusal. Transport failures are
// errors. log receives the state changes; nil discards them.
func NewPath(ctx context.Context, r Runner, lun uint64, inq InquiryData, log *slog.Logger) (*Path, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p := &Path{r: r, lun: lun, tpgs: inq.TPGS, log: log}
	p.alua.Store(0xff)
	p.id.Store(&DeviceID{})
	if _, err := p.Refresh(ctx); err != nil {
		return nil, err
	}
	return p, nil
}

// ALUA reports whether the LU supports asymmetric access (TPGS != 0).
func (p *Path) ALUA() bool { return p.tpgs != 0 }

// AccessState returns the path's state: AccessUnknown without ALUA.
func (p *Path) AccessState() blockdev.AccessState { return blockdev.AccessState(p.state.Load()) }

// ALUAState returns the asymmetric access state of the path's group as
// REPORT TARGET PORT GROUPS last told it; ok is false when none was read.
func (p *Path) ALUAState() (scsi.ALUAState, bool) {
	v := p.alua.Load()
	return scsi.ALUAState(v), v != 0xff
}

// DeviceID returns what VPD page 83h last said.
func (p *Path) DeviceID() DeviceID { return *p.id.Load() }

// DiskID returns the LU's identity (DeviceID.DiskID).
func (p *Path) DiskID() string { return p.id.Load().DiskID() }

// Close stops the refreshes Failed and UnitAttention start.
func (p *Path) Close() { p.closed.Store(true) }

// Refresh reads VPD page 83h (the port's group may have changed) and, with
// ALUA, REPORT TARGET PORT GROUPS, and returns the path's state: that of
// the group VPD page 83h names (or, without a group designator, the group
// listing the path's relative target port). When the target refuses the
// commands for the path's state (NOT READY 04h/xx), that state is taken.
func (p *Path) Refresh(ctx context.Context) (blockdev.AccessState, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	id, err := ReadDeviceID(ctx, p.r, p.lun)
	if err != nil {
		if st, ok := statusAccess(err); ok {
			p.set(st, 0xff)
			return st, nil
		}
		if err = optional(err); err != nil {
			return p.AccessState(), fmt.Errorf("LUN %d: %w", p.lun, err)
		}
	} else {
		p.id.Store(&id)
	}
	if p.tpgs == 0 {
		return blockdev.AccessUnknown, nil
	}
	tpg, err := ReadTargetPortGroups(ctx, p.r, p.lun)
	if err != nil {
		if st, ok := statusAccess(err); ok {
			p.set(st, 0xff)
			return st, nil
		}
		return p.AccessState(), fmt.Errorf("LUN %d: %w", p.lun, err)
	}
	cur := p.id.Load()
	for _, g := range tpg.Groups {
		mine := cur.HasPortGroup && g.ID == cur.PortGroup
		if !cur.HasPortGroup && cur.HasRelativePort {
			for _, port := range g.Ports {
				mine = mine || port == cur.RelativeTargetPort
			}
		}
		if mine {
			st := AccessState(g.State)
			p.set(st, uint32(g.State))
			return st, nil
		}
	}
	return p.AccessState(), fmt.Errorf("LUN %d: %s lists no group of this path (group %d, port %d): %w",
		p.lun, NameRTPG, cur.PortGroup, cur.RelativeTargetPort, ErrNoPortGroup)
}

// statusAccess is SenseAccessState of a *StatusError.
func statusAccess(err error) (blockdev.AccessState, bool) {
	var se *StatusError
	if !errors.As(err, &se) {
		return blockdev.AccessUnknown, false
	}
	return SenseAccessState(se.Status, se.Sense)
}

// set records a new state, logging a change.
func (p *Path) set(st blockdev.AccessState, alua uint32) {
	if alua != 0xff {
		p.alua.Store(alua)
	}
	if old := blockdev.AccessState(p.state.Swap(uint32(st))); old != st {
		p.log.Info("scsi host: path access state changed", "lun", p.lun, "old", old.String(), "state", st.String())
	}
}

// Failed looks at a command that completed with status st and sense
// data sense: when its path's access state refused it, the state is
// recorded at once, REPORT TARGET PORT GROUPS is read again on another
// goroutine, and Failed returns the state and true. It does not allocate
// otherwise.
func (p *Path) Failed(st scsi.Status, sense []byte) (blockdev.AccessState, bool) {
	as, ok := SenseAccessState(st, sense)
	if !ok {
		return blockdev.AccessUnknown, false
	}
	if blockdev.AccessState(p.state.Load()) != as {
		p.set(as, 0xff)
	}
	p.RefreshAsync()
	return as, true
}

// UnitAttention looks at a unit attention a command reported: ASYMMETRIC
// ACCESS STATE CHANGED and IMPLICIT TRANSITION FAILED read the state again
// on another goroutine.
func (p *Path) UnitAttention(ua UnitAttention) {
	if ua == ALUAChanged {
		p.RefreshAsync()
	}
}

// refreshTimeout bounds a background refresh.
const refreshTimeout = 30 * time.Second

// RefreshAsync runs Refresh on a goroutine of its own, unless one is
// already pending. Transports call it from completion paths, which must
// not wait for commands.
func (p *Path) RefreshAsync() {
	if p.closed.Load() || p.pending.Swap(true) {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), refreshTimeout)
		defer cancel()
		p.pending.Store(false)
		if _, err := p.Refresh(ctx); err != nil && !p.closed.Load() {
			p.log.Warn("scsi host: re-reading the path's access state failed", "lun", p.lun, "err", err)
		}
	}()
}

// PathError returns the error of a request its path refused: a
// *blockdev.PathError (matching blockdev.ErrPath and ErrIO) with the state
// and err (the command's *StatusError).
func PathError(st blockdev.AccessState, err error) error {
	return &blockdev.PathError{State: st, Err: err}
}
