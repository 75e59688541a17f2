package iser

import (
	"fmt"
	"slices"
	"strconv"
)

// role is the side a negotiator speaks for.
type role uint8

const (
	roleInitiator role = iota
	roleTarget
)

func (r role) bit() uint8 {
	if r == roleTarget {
		return fromTarget
	}
	return fromInitiator
}

func (r role) peerBit() uint8 {
	if r == roleTarget {
		return fromInitiator
	}
	return fromTarget
}

// keyState is what one side knows about one key during a negotiation.
type keyState struct {
	sent     bool   // we offered or declared it
	offered  string // the value we sent
	got      bool   // the peer offered or declared it
	replied  bool   // the peer answered our offer
	value    string // negotiated result, or the peer's declaration; "" means the default
	answered bool   // we answered the peer's offer
}

// negotiator runs the text negotiation of RFC 7143 section 6 for one side
// of one connection: it answers the peer's offers (the responder) and
// checks the peer's answers to its own offers (the originator). Both login
// engines drive it; it is not safe for concurrent use.
type negotiator struct {
	role      role
	iser      bool
	discovery bool
	local     [numKeys]string
	st        [numKeys]keyState
}

func newNegotiator(r role, transport Transport, s *Settings) negotiator {
	return negotiator{role: r, iser: transport == TransportISER, local: s.localValues(transport)}
}

// localOrDefault returns this side's value for a key.
func (n *negotiator) localOrDefault(id keyID) string {
	if v := n.local[id]; v != "" {
		return v
	}
	return def(id).def
}

// result returns the value in force for a key: negotiated, declared by the
// peer, or the default.
func (n *negotiator) result(id keyID) string {
	if v := n.st[id].value; v != "" {
		return v
	}
	return def(id).def
}

// rdmaRelevant reports whether the RFC 7145 keys apply: iSER transport and
// RDMAExtensions not negotiated to No.
func (n *negotiator) rdmaRelevant() bool {
	if !n.iser || n.discovery {
		return false
	}
	if n.st[kRDMAExtensions].value == ValueNo {
		return false
	}
	return true
}

// rdmaMode reports an iSER-assisted session: RDMAExtensions=Yes.
func (n *negotiator) rdmaMode() bool { return n.iser && n.result(kRDMAExtensions) == ValueYes }

// offer appends key=value and records it as sent.
func (n *negotiator) offer(dst []byte, id keyID, value string) []byte {
	n.st[id].sent = true
	n.st[id].offered = value
	return AppendKeyValue(dst, def(id).name, value)
}

// receivePriority orders the keys of one PDU so that the keys others depend
// on are settled first.
func receivePriority(id keyID, ok bool) int {
	if !ok {
		return 4
	}
	switch id {
	case kSessionType:
		return 0
	case kRDMAExtensions:
		return 1
	case kMaxBurstLength:
		return 2
	}
	return 3
}

// receive processes the pairs of one PDU (authentication keys already
// removed) received in the given stage (inSecurity, inOperational or
// inFullFeature) and appends the answers to dst. The error is a protocol
// error the login fails with (LoginInitiatorError).
func (n *negotiator) receive(dst []byte, kvs []KeyValue, stage uint8) ([]byte, error) {
	order := make([]int, len(kvs))
	for i := range order {
		order[i] = i
	}
	prio := func(i int) int { id, ok := lookupKey(kvs[i].Key); return receivePriority(id, ok) }
	slices.SortStableFunc(order, func(a, b int) int { return prio(a) - prio(b) })
	for _, i := range order {
		kv := kvs[i]
		id, ok := lookupKey(kv.Key)
		if !ok {
			if !isSpecialValue(kv.Value) {
				dst = AppendKeyValue(dst, kv.Key, ValueNotUnderstood)
			}
			continue
		}
		st := &n.st[id]
		k := def(id).kind
		declarative := k == kindDecl || k == kindDeclNum
		// A value for a key we offered is its answer; for a key we
		// declared, only a special value answers (anything else is the
		// peer's own declaration, as MaxRecvDataSegmentLength).
		if st.sent && !st.replied && !st.got && (!declarative || isSpecialValue(kv.Value)) {
			if err := n.answerReceived(id, kv.Value); err != nil {
				return dst, err
			}
			continue
		}
		if st.got {
			// RFC 7143 section 6.1 forbids repeating a key; libiscsi
			// re-sends its names in the operational stage after a CHAP
			// security stage, so an identical re-declaration passes.
			if declarative && st.value == kv.Value {
				continue
			}
			return dst, fmt.Errorf("%w: %s", errDuplicateKey, kv.Key)
		}
		st.got = true
		answer, err := n.offerReceived(id, kv.Value, stage)
		if err != nil {
			return dst, err
		}
		if answer != "" {
			st.answered = true
			dst = AppendKeyValue(dst, kv.Key, answer)
		}
	}
	return dst, nil
}

// offerReceived answers an offer or records a declaration of the peer. It
// returns the answer, or "" when none is due (declarations).
func (n *negotiator) offerReceived(id keyID, value string, stage uint8) (string, error) {
	d := def(id)
	st := &n.st[id]
	if isSpecialValue(value) {
		if value == ValueIrrelevant {
			return "", nil
		}
		return "", fmt.Errorf("%w: %s=%s offered", errBadValue, d.name, value)
	}
	if d.senders&n.role.peerBit() == 0 || d.stages&stage == 0 {
		return ValueReject, nil
	}
	if (n.discovery && d.discIrrelevant) || (d.rdma && !n.rdmaRelevant()) {
		return ValueIrrelevant, nil
	}
	switch d.kind {
	case kindDecl:
		if id == kSessionType && value != SessionNormal.String() && value != SessionDiscovery.String() {
			return ValueReject, nil
		}
		st.value = value
		if id == kSessionType {
			n.discovery = value == SessionDiscovery.String()
		}
		return "", nil
	case kindDeclNum:
		if _, ok := numberIn(id, value); !ok {
			return ValueReject, nil
		}
		st.value = value
		return "", nil
	case kindObsolete:
		return ValueReject, nil
	case kindBoolAnd, kindBoolOr:
		b, ok := parseBool(value)
		if !ok {
			return ValueReject, nil
		}
		l, _ := parseBool(n.localOrDefault(id))
		if d.kind == kindBoolAnd {
			b = b && l
		} else {
			b = b || l
		}
		st.value = boolValue(b)
		return st.value, nil
	case kindMin, kindMax:
		v, ok := numberIn(id, value)
		if !ok {
			return ValueReject, nil
		}
		l, _ := parseNumber(n.localOrDefault(id))
		if d.kind == kindMin {
			v = min(v, l)
		} else {
			v = max(v, l)
		}
		if id == kFirstBurstLength {
			mbl, _ := parseNumber(n.result(kMaxBurstLength))
			v = min(v, mbl)
		}
		st.value = strconv.FormatUint(v, 10)
		return st.value, nil
	case kindList:
		offered, ok := listValues(value)
		if !ok {
			return ValueReject, nil
		}
		supported, _ := listValues(n.localOrDefault(id))
		for _, v := range offered {
			if slices.Contains(supported, v) {
				st.value = v
				return v, nil
			}
		}
		return ValueReject, nil
	}
	return ValueNotUnderstood, nil
}

// answerReceived checks the peer's answer to one of our offers.
func (n *negotiator) answerReceived(id keyID, value string) error {
	d := def(id)
	st := &n.st[id]
	st.replied = true
	if d.kind == kindDecl || d.kind == kindDeclNum || d.kind == kindObsolete {
		return nil // declarations need no answer; whatever comes is informational
	}
	if isSpecialValue(value) {
		// Reject, Irrelevant and NotUnderstood leave the key at its
		// default; finish decides whether the session can live with it.
		st.value = ""
		return nil
	}
	bad := func() error { return fmt.Errorf("%w: %s=%s answers %s", errAnswer, d.name, value, st.offered) }
	switch d.kind {
	case kindBoolAnd, kindBoolOr:
		b, ok := parseBool(value)
		o, _ := parseBool(st.offered)
		if !ok || (d.kind == kindBoolAnd && b && !o) || (d.kind == kindBoolOr && !b && o) {
			return bad()
		}
		st.value = value
	case kindMin, kindMax:
		v, ok := numberIn(id, value)
		o, _ := parseNumber(st.offered)
		if !ok || (d.kind == kindMin && v > o) || (d.kind == kindMax && v < o) {
			return bad()
		}
		st.value = strconv.FormatUint(v, 10)
	case kindList:
		offered, _ := listValues(st.offered)
		if !slices.Contains(offered, value) {
			return bad()
		}
		st.value = value
	}
	return nil
}

// unansweredDefaults resolves offers the peer did not answer. The answer
// may be omitted when the result is fixed by the offer (RFC 7143 section
// 6.2.2: Boolean AND offered No, OR offered Yes); anything else is a
// protocol error.
func (n *negotiator) unansweredDefaults() error {
	for id := keyID(0); id < numKeys; id++ {
		st := &n.st[id]
		if !st.sent || st.replied || st.got {
			continue
		}
		d := def(id)
		switch {
		case d.kind == kindDecl || d.kind == kindDeclNum || d.kind == kindObsolete:
		case d.kind == kindBoolAnd && st.offered == ValueNo, d.kind == kindBoolOr && st.offered == ValueYes:
			st.value = st.offered
		default:
			return fmt.Errorf("%w: %s", errNoAnswer, d.name)
		}
	}
	return nil
}

// conflicts returns the relevant operational keys the peer has not
// offered and whose default this side cannot accept; a target proposes
// them before it lets the login leave the operational stage.
func (n *negotiator) conflicts() []keyID {
	var ids []keyID
	for id := keyID(0); id < numKeys; id++ {
		d := def(id)
		st := &n.st[id]
		if st.got || st.sent || d.stages&inOperational == 0 || d.senders&n.role.bit() == 0 {
			continue
		}
		if (n.discovery && d.discIrrelevant) || (d.rdma && !n.rdmaMode()) {
			continue
		}
		l := n.local[id]
		if l == "" {
			continue
		}
		dv := d.def
		switch d.kind {
		case kindBoolAnd:
			if dv == ValueYes && l == ValueNo {
				ids = append(ids, id)
			}
		case kindBoolOr:
			if dv == ValueNo && l == ValueYes {
				ids = append(ids, id)
			}
		case kindMin, kindMax:
			dn, _ := parseNumber(dv)
			ln, _ := parseNumber(l)
			if (d.kind == kindMin && dn > ln) || (d.kind == kindMax && dn < ln) {
				ids = append(ids, id)
			}
		case kindList:
			supported, _ := listValues(l)
			if !slices.Contains(supported, dv) {
				ids = append(ids, id)
			}
		}
	}
	return ids
}

// params builds the negotiated parameters. Both sides call it when the
// login reaches full feature phase.
func (n *negotiator) params() Params {
	num := func(id keyID) uint64 { v, _ := parseNumber(n.result(id)); return v }
	yes := func(id keyID) bool { return n.result(id) == ValueYes }
	p := Params{
		SessionType:          SessionNormal,
		InitiatorName:        n.st[kInitiatorName].value,
		InitiatorAlias:       n.st[kInitiatorAlias].value,
		TargetName:           n.st[kTargetName].value,
		TargetAlias:          n.st[kTargetAlias].value,
		TargetAddress:        n.st[kTargetAddress].value,
		TargetPortalGroupTag: uint16(num(kTargetPortalGroupTag)),
		HeaderDigest:         n.result(kHeaderDigest) == DigestCRC32C.String(),
		DataDigest:           n.result(kDataDigest) == DigestCRC32C.String(),
		MaxConnections:       uint16(num(kMaxConnections)),
		InitialR2T:           yes(kInitialR2T),
		ImmediateData:        yes(kImmediateData),
		MaxBurstLength:       uint32(num(kMaxBurstLength)),
		FirstBurstLength:     uint32(num(kFirstBurstLength)),
		DefaultTime2Wait:     uint16(num(kDefaultTime2Wait)),
		DefaultTime2Retain:   uint16(num(kDefaultTime2Retain)),
		MaxOutstandingR2T:    uint16(num(kMaxOutstandingR2T)),
		DataPDUInOrder:       yes(kDataPDUInOrder),
		DataSequenceInOrder:  yes(kDataSequenceInOrder),
		ErrorRecoveryLevel:   uint8(num(kErrorRecoveryLevel)),
		TaskReporting:        n.result(kTaskReporting),
		ProtocolLevel:        uint8(num(kProtocolLevel)),
		RDMAExtensions:       n.rdmaMode(),
	}
	if n.discovery {
		p.SessionType = SessionDiscovery
	}
	if p.FirstBurstLength > p.MaxBurstLength {
		p.FirstBurstLength = p.MaxBurstLength
	}
	mine, _ := parseNumber(n.localOrDefault(kMaxRecvDataSegmentLength))
	p.MaxRecvDataSegmentLength = uint32(mine)
	p.MaxSendDataSegmentLength = uint32(num(kMaxRecvDataSegmentLength))
	if p.RDMAExtensions {
		p.InitiatorRecvDataSegmentLength = uint32(num(kInitiatorRecvDataSegmentLength))
		p.TargetRecvDataSegmentLength = uint32(num(kTargetRecvDataSegmentLength))
		if n.role == roleTarget {
			p.MaxRecvDataSegmentLength = p.TargetRecvDataSegmentLength
			p.MaxSendDataSegmentLength = p.InitiatorRecvDataSegmentLength
		} else {
			p.MaxRecvDataSegmentLength = p.InitiatorRecvDataSegmentLength
			p.MaxSendDataSegmentLength = p.TargetRecvDataSegmentLength
		}
		p.MaxOutstandingUnexpectedPDUs = uint32(num(kMaxOutstandingUnexpectedPDUs))
		p.HeaderDigest, p.DataDigest = false, false
	}
	return p
}
