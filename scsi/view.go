package scsi

import (
	"fmt"
	"slices"
)

// LUNMapping is one LUN of a LUNView: the LUN number the session's
// initiator addresses and the target LUN (Target.Map) it reaches.
type LUNMapping struct {
	// MappedLUN is the LUN number the initiator sees and addresses
	// (0-MaxLUN): REPORT LUNS lists it, commands carry it.
	MappedLUN uint64
	// LUN is the target's LUN number the mapping reaches (0-MaxLUN).
	LUN uint64
	// ReadOnly write-protects the mapping, as LIO's write_protect of a
	// mapped LUN: commands through it that would modify the medium or the
	// LU's mode parameters fail with DATA PROTECT / WRITE PROTECTED, and
	// MODE SENSE reports WP. Other sessions reaching the same LU through
	// a writable mapping are not affected.
	ReadOnly bool
}

// LUNView is the set of LUNs one session sees: a per-initiator LUN map
// over the target's, as LIO's mapped LUNs of a node ACL (mapped_lun0 ->
// tpg LUN 3). A session without a view (SessionConfig.View nil) sees the
// target's whole LUN map under the target's LUN numbers.
//
// With a view, REPORT LUNS lists the mapped LUNs whose target LUN is mapped
// (in mapped LUN order); a command to any other LUN is answered as one to a
// LUN that does not exist (INQUIRY peripheral qualifier 011b, LOGICAL UNIT
// NOT SUPPORTED), task management to it as an unknown LUN. A mapping whose
// target LUN is not mapped is invisible until the target maps that LUN.
// Everything else keys on the logical unit, not on the LUN number it is
// reached by: reservations, unit attentions, task sets and mode pages of an
// LU are the same however the LU is numbered in each session's view. One
// view may map two of its LUNs to one target LUN.
//
// A LUNView is immutable; it may be shared by many sessions. Create it with
// NewLUNView; the zero value and NewLUNView(nil) are an empty view (the
// session sees no LUN).
type LUNView struct {
	m []LUNMapping // sorted by MappedLUN, unique
}

// NewLUNView checks mappings and returns their view. Mapped and target LUN
// numbers above MaxLUN fail with ErrLUNRange, a mapped LUN listed twice
// with ErrLUNInUse. The order of mappings does not matter.
func NewLUNView(mappings []LUNMapping) (*LUNView, error) {
	m := slices.Clone(mappings)
	for _, x := range m {
		if x.MappedLUN > MaxLUN {
			return nil, fmt.Errorf("%w: mapped LUN %d", ErrLUNRange, x.MappedLUN)
		}
		if x.LUN > MaxLUN {
			return nil, fmt.Errorf("%w: mapped LUN %d -> LUN %d", ErrLUNRange, x.MappedLUN, x.LUN)
		}
	}
	slices.SortFunc(m, func(a, b LUNMapping) int {
		switch {
		case a.MappedLUN < b.MappedLUN:
			return -1
		case a.MappedLUN > b.MappedLUN:
			return 1
		}
		return 0
	})
	for i := 1; i < len(m); i++ {
		if m[i].MappedLUN == m[i-1].MappedLUN {
			return nil, fmt.Errorf("%w: mapped LUN %d listed twice", ErrLUNInUse, m[i].MappedLUN)
		}
	}
	return &LUNView{m: m}, nil
}

// Mappings returns the view's mappings in mapped LUN order.
func (v *LUNView) Mappings() []LUNMapping {
	if v == nil {
		return nil
	}
	return slices.Clone(v.m)
}

// find returns the mapping of mapped LUN lun, or nil.
func (v *LUNView) find(lun uint64) *LUNMapping {
	i, ok := slices.BinarySearchFunc(v.m, lun, func(x LUNMapping, lun uint64) int {
		switch {
		case x.MappedLUN < lun:
			return -1
		case x.MappedLUN > lun:
			return 1
		}
		return 0
	})
	if !ok {
		return nil
	}
	return &v.m[i]
}

// sessionView is a session's view resolved against its target's LUN map:
// what commands are looked up in. It is replaced, never modified, under
// Target.mu whenever the view or the target's LUN map changes.
type sessionView struct {
	view *LUNView
	luns []lunEntry // the visible mappings, by mapped LUN
}

// resolveLocked resolves v against the current LUN map (t.mu held). A nil
// view resolves to nil: the whole map.
func (t *Target) resolveLocked(v *LUNView) *sessionView {
	if v == nil {
		return nil
	}
	m := *t.luns.Load()
	sv := &sessionView{view: v, luns: make([]lunEntry, 0, len(v.m))}
	for _, x := range v.m {
		if e := findLUN(m, x.LUN); e != nil {
			sv.luns = append(sv.luns, lunEntry{lun: x.MappedLUN, lu: e.lu, ro: x.ReadOnly})
		}
	}
	return sv
}

// refreshViewsLocked re-resolves the views of the sessions after a change
// of the LUN map (t.mu held) and gives REPORTED LUNS DATA HAS CHANGED to
// every session whose visible LUNs changed: all sessions without a view,
// those with one whose view maps the LUN that changed.
func (t *Target) refreshViewsLocked() {
	for _, s := range t.sessions {
		sv := s.view.Load()
		if sv == nil {
			s.lunsChanged.Store(true)
			continue
		}
		nv := t.resolveLocked(sv.view)
		s.view.Store(nv)
		if !slices.Equal(sv.luns, nv.luns) {
			s.lunsChanged.Store(true)
		}
	}
}

// luns returns the LUNs the session sees, sorted by the LUN number it
// addresses them with.
func (s *Session) luns() []lunEntry {
	if sv := s.view.Load(); sv != nil {
		return sv.luns
	}
	return *s.t.luns.Load()
}

// lookup returns the entry the session reaches as LUN lun, or nil.
func (s *Session) lookup(lun uint64) *lunEntry { return findLUN(s.luns(), lun) }

// View returns the session's LUN view; nil when it sees the target's whole
// LUN map.
func (s *Session) View() *LUNView {
	if sv := s.view.Load(); sv != nil {
		return sv.view
	}
	return nil
}

// SetView replaces the session's LUN view (nil: the target's whole LUN
// map) while the session runs. The swap is atomic: each command is looked
// up in the old view or the new one, and commands already running complete
// as they started. When the LUNs the session sees change (a LUN appears or
// goes, reaches another LU, or its read-only flag changes) the session gets
// a REPORTED LUNS DATA HAS CHANGED unit attention. The session's state on
// an LU the new view hides (unit attentions, reservations) stays.
func (s *Session) SetView(v *LUNView) error {
	t := s.t
	t.mu.Lock()
	defer t.mu.Unlock()
	if s.closed.Load() {
		return ErrSessionClosed
	}
	old := s.luns()
	s.view.Store(t.resolveLocked(v))
	if !slices.Equal(old, s.luns()) {
		s.lunsChanged.Store(true)
	}
	return nil
}

// TargetLUN returns the target LUN number that the session's LUN lun
// addresses: lun itself when the session has no view; with a view, the
// target LUN of the mapping, ok false when the view does not map lun.
// Transports use it to look up per-LUN settings of their own.
func (s *Session) TargetLUN(lun uint64) (target uint64, ok bool) {
	sv := s.view.Load()
	if sv == nil {
		return lun, true
	}
	if m := sv.view.find(lun); m != nil {
		return m.LUN, true
	}
	return 0, false
}
