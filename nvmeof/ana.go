package nvmeof

import (
	"encoding/binary"
	"fmt"
)

// Asymmetric Namespace Access (NVMe Base 2.0 §8.1): a namespace belongs to
// an ANA group, and each controller reports the access state of every
// group through the ANA log page (LID 0Ch), as Linux nvmet fills it
// (drivers/nvme/target/admin-cmd.c, nvmet_execute_get_log_page_ana) and
// the Linux host reads it (drivers/nvme/host/multipath.c,
// nvme_parse_ana_log).

// ANAState is an ANA group's access state as the log page carries it
// (enum nvme_ana_state).
type ANAState uint8

// ANA states (NVMe Base 2.0 §8.1.3, Figure 209 "ANA State").
const (
	ANAOptimized      ANAState = 0x01 // NVME_ANA_OPTIMIZED
	ANANonOptimized   ANAState = 0x02 // NVME_ANA_NONOPTIMIZED
	ANAInaccessible   ANAState = 0x03 // NVME_ANA_INACCESSIBLE
	ANAPersistentLoss ANAState = 0x04 // NVME_ANA_PERSISTENT_LOSS
	ANAChange         ANAState = 0x0f // NVME_ANA_CHANGE
)

// String returns the state's name as nvmet's configfs ana_state attribute
// spells it.
func (s ANAState) String() string {
	switch s {
	case ANAOptimized:
		return "optimized"
	case ANANonOptimized:
		return "non-optimized"
	case ANAInaccessible:
		return "inaccessible"
	case ANAPersistentLoss:
		return "persistent-loss"
	case ANAChange:
		return "change"
	}
	return fmt.Sprintf("ANAState(%#x)", uint8(s))
}

// Valid reports whether s is one of the five defined states.
func (s ANAState) Valid() bool {
	switch s {
	case ANAOptimized, ANANonOptimized, ANAInaccessible, ANAPersistentLoss, ANAChange:
		return true
	}
	return false
}

// Usable reports whether a namespace in a group of state s serves I/O.
func (s ANAState) Usable() bool { return s == ANAOptimized || s == ANANonOptimized }

// IOStatus is the status an I/O command to a namespace in state s
// completes with, as nvmet_check_ana_state answers it: ANA Inaccessible,
// ANA Persistent Loss or ANA Transition (path related, DNR clear, so the
// host retries it on another path), and StatusSuccess for the states that
// serve I/O.
func (s ANAState) IOStatus() Status {
	switch s {
	case ANAInaccessible:
		return StatusANAInaccessible
	case ANAPersistentLoss:
		return StatusANAPersistentLoss
	case ANAChange:
		return StatusANATransition
	}
	return StatusSuccess
}

const errANAState = errorString("nvmeof: unknown ANA state")

// ParseANAState parses a state by its nvmet configfs name ("optimized",
// "non-optimized", "inaccessible", "persistent-loss", "change").
func ParseANAState(name string) (ANAState, error) {
	for _, s := range [...]ANAState{ANAOptimized, ANANonOptimized, ANAInaccessible, ANAPersistentLoss, ANAChange} {
		if s.String() == name {
			return s, nil
		}
	}
	return 0, fmt.Errorf("%w %q: want optimized, non-optimized, inaccessible, persistent-loss or change", errANAState, name)
}

// Identify Controller ANACAP bits (NVMe Base 2.0 §5.17.2.1, ANA
// Capabilities).
const (
	ANACAPOptimized      uint8 = 1 << 0 // reports ANA Optimized
	ANACAPNonOptimized   uint8 = 1 << 1 // reports ANA Non-Optimized
	ANACAPInaccessible   uint8 = 1 << 2 // reports ANA Inaccessible
	ANACAPPersistentLoss uint8 = 1 << 3 // reports ANA Persistent Loss
	ANACAPChange         uint8 = 1 << 4 // reports ANA Change
	// ANACAPGroupIDStatic: ANAGRPID does not change while the namespace
	// is attached.
	ANACAPGroupIDStatic uint8 = 1 << 6
	// ANACAPGroupIDNonZero: a non-zero ANAGRPID is supported in Namespace
	// Management.
	ANACAPGroupIDNonZero uint8 = 1 << 7

	// ANACAPAllStates is what nvmet reports: all five states.
	ANACAPAllStates = ANACAPOptimized | ANACAPNonOptimized | ANACAPInaccessible | ANACAPPersistentLoss | ANACAPChange
)

// ANALogRGO is the Return Groups Only bit of the Get Log Page LSP for the
// ANA log (NVME_ANA_LOG_RGO): the descriptors come without their NSID
// lists.
const ANALogRGO uint8 = 1 << 0

// ANA log page sizes (struct nvme_ana_rsp_hdr, struct nvme_ana_group_desc).
const (
	ANALogHeaderSize = 16 // chgcnt, ngrps, rsvd10[3]
	ANAGroupDescSize = 32 // grpid, nnsids, chgcnt, state, rsvd17[15]; nsids[] follow
)

// ANALogSize returns the size of an ANA log page of ngroups descriptors
// listing nsids namespaces in all, the way Linux nvme_mpath_init_identify
// sizes its buffer from NANAGRPID and MNAN.
func ANALogSize(ngroups, nsids int) int {
	return ANALogHeaderSize + ngroups*ANAGroupDescSize + nsids*4
}

// ANAGroupDesc is one ANA Group Descriptor of the ANA log page.
type ANAGroupDesc struct {
	GroupID uint32 // grpid, 1..ANAGRPMAX
	// ChangeCount is the group's change count (chgcnt).
	ChangeCount uint64
	State       ANAState
	// NSIDs are the namespaces of the group attached to the controller
	// (nnsids, nsids[]), ascending; empty with RGO.
	NSIDs []uint32
}

// ANALog is the Asymmetric Namespace Access log page (LID 0Ch, NVMe Base
// 2.0 §5.16.1.13).
type ANALog struct {
	// ChangeCount is the log's change count (chgcnt): it moves whenever
	// a state or a membership changes.
	ChangeCount uint64
	Groups      []ANAGroupDesc
}

// Size returns the bytes Encode writes: without NSID lists with rgo.
func (l *ANALog) Size(rgo bool) int {
	n := ANALogHeaderSize
	for i := range l.Groups {
		n += ANAGroupDescSize
		if !rgo {
			n += 4 * len(l.Groups[i].NSIDs)
		}
	}
	return n
}

// Encode writes the log page into b (at least Size(rgo) bytes) and returns
// its size. With rgo (Return Groups Only) every descriptor has NNSIDS 0
// and no NSID list, as nvmet_format_ana_group writes it. It fails on more
// than 65535 groups (NGRPS is 16 bits), a group ID of 0 or a state that is
// not one of the five.
func (l *ANALog) Encode(b []byte, rgo bool) (int, error) {
	if len(l.Groups) > 0xffff {
		return 0, fieldErr("ANA log", "NGRPS", 8, fmt.Errorf("%w: %d groups", errTooManyEntries, len(l.Groups)))
	}
	size := l.Size(rgo)
	if len(b) < size {
		return 0, fmt.Errorf("%w: ANA log needs %d bytes, have %d", errShortBuffer, size, len(b))
	}
	off := ANALogHeaderSize
	for i := range l.Groups {
		g := &l.Groups[i]
		if g.GroupID == 0 {
			return 0, fieldErr("ANA log", "ANAGRPID", off, errANAGroupID)
		}
		if !g.State.Valid() {
			return 0, fieldErr("ANA log", "ANAS", off+16, fmt.Errorf("%w: %#x", errANAState, uint8(g.State)))
		}
		off += ANAGroupDescSize
		if !rgo {
			off += 4 * len(g.NSIDs)
		}
	}
	b = b[:size]
	clear(b)
	le := binary.LittleEndian
	le.PutUint64(b[0:], l.ChangeCount)
	le.PutUint16(b[8:], uint16(len(l.Groups)))
	off = ANALogHeaderSize
	for i := range l.Groups {
		g := &l.Groups[i]
		d := b[off:]
		le.PutUint32(d[0:], g.GroupID)
		le.PutUint64(d[8:], g.ChangeCount)
		d[16] = uint8(g.State)
		off += ANAGroupDescSize
		if rgo {
			continue
		}
		le.PutUint32(d[4:], uint32(len(g.NSIDs)))
		for j, id := range g.NSIDs {
			le.PutUint32(d[ANAGroupDescSize+4*j:], id)
		}
		off += 4 * len(g.NSIDs)
	}
	return size, nil
}

const (
	errANAGroupID  = errorString("nvmeof: ANA group ID 0")
	errANALogShort = errorString("nvmeof: ANA log page ends inside a group descriptor")
)

// ParseANALog parses an ANA log page as a host reads it, checking what
// Linux nvme_parse_ana_log checks: each of the NGRPS descriptors and its
// NSID list lie within b, ANAGRPID is not 0 and the state is one of the
// five (Linux accepts the reserved values 05h-0Eh too; they are refused
// here). The caller checks ANAGRPID against its controller's ANAGRPMAX.
// Bytes past the last descriptor are ignored.
func ParseANALog(b []byte) (ANALog, error) {
	var l ANALog
	if len(b) < ANALogHeaderSize {
		return l, fmt.Errorf("%w: ANA log %d bytes, want at least %d", errShortLogPage, len(b), ANALogHeaderSize)
	}
	le := binary.LittleEndian
	l.ChangeCount = le.Uint64(b[0:])
	ngrps := int(le.Uint16(b[8:]))
	// Every descriptor takes 32 bytes: a count that cannot fit is refused
	// before anything is allocated for it.
	if ngrps > (len(b)-ANALogHeaderSize)/ANAGroupDescSize {
		return l, fmt.Errorf("%w: %d groups in %d bytes", errANALogShort, ngrps, len(b))
	}
	l.Groups = make([]ANAGroupDesc, 0, ngrps)
	off := ANALogHeaderSize
	for i := 0; i < ngrps; i++ {
		if len(b)-off < ANAGroupDescSize {
			return l, fmt.Errorf("%w: descriptor %d at byte %d of %d", errANALogShort, i, off, len(b))
		}
		d := b[off:]
		g := ANAGroupDesc{GroupID: le.Uint32(d[0:]), ChangeCount: le.Uint64(d[8:]), State: ANAState(d[16])}
		nn := le.Uint32(d[4:])
		if g.GroupID == 0 {
			return l, fieldErr("ANA log", "ANAGRPID", off, errANAGroupID)
		}
		if !g.State.Valid() {
			return l, fieldErr("ANA log", "ANAS", off+16, fmt.Errorf("%w: %#x", errANAState, uint8(g.State)))
		}
		off += ANAGroupDescSize
		if uint64(nn) > uint64(len(b)-off)/4 {
			return l, fmt.Errorf("%w: group %d lists %d namespaces in the %d bytes left", errANALogShort, g.GroupID, nn, len(b)-off)
		}
		if nn > 0 {
			g.NSIDs = make([]uint32, nn)
			for j := range g.NSIDs {
				g.NSIDs[j] = le.Uint32(b[off+4*j:])
			}
		}
		off += 4 * int(nn)
		l.Groups = append(l.Groups, g)
	}
	return l, nil
}
