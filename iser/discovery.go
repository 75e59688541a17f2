package iser

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// TargetRecord is one target of a SendTargets response: its name and the
// TargetAddress values that reach it.
type TargetRecord struct {
	Name string
	// Addresses are TargetAddress values, "host:port,tpgt" (see
	// FormatTargetAddress).
	Addresses []string
}

// FormatTargetAddress formats a TargetAddress value: "10.0.0.1:3260,1", or
// "[fe80::1]:3260,1" for IPv6 (RFC 7143 section 13.8).
func FormatTargetAddress(ap netip.AddrPort, tpgt uint16) string {
	return ap.String() + "," + strconv.Itoa(int(tpgt))
}

// ParseTargetAddress splits a TargetAddress value into host, port and
// portal group tag. The port defaults to 3260; hasTag reports whether a tag
// was given. IPv6 hosts are returned without brackets.
func ParseTargetAddress(s string) (host string, port uint16, tag uint16, hasTag bool, err error) {
	bad := func() (string, uint16, uint16, bool, error) {
		return "", 0, 0, false, fmt.Errorf("%w: %.80q", errTargetAddressFmt, s)
	}
	port = 3260
	rest := s
	if i := strings.LastIndexByte(rest, ','); i >= 0 {
		t, ok := parseNumber(rest[i+1:])
		if !ok || t > 65535 {
			return bad()
		}
		tag, hasTag, rest = uint16(t), true, rest[:i]
	}
	if strings.HasPrefix(rest, "[") {
		end := strings.IndexByte(rest, ']')
		if end < 0 {
			return bad()
		}
		host, rest = rest[1:end], rest[end+1:]
		if rest != "" && rest[0] != ':' {
			return bad()
		}
	} else if i := strings.LastIndexByte(rest, ':'); i >= 0 {
		host, rest = rest[:i], rest[i:]
	} else {
		host, rest = rest, ""
	}
	if rest != "" {
		p, err := strconv.ParseUint(rest[1:], 10, 16)
		if err != nil {
			return bad()
		}
		port = uint16(p)
	}
	if host == "" {
		return bad()
	}
	return host, port, tag, hasTag, nil
}

// AppendSendTargets appends the text of a SendTargets response: for each
// target a TargetName pair followed by its TargetAddress pairs.
func AppendSendTargets(dst []byte, targets []TargetRecord) []byte {
	for _, t := range targets {
		dst = AppendKeyValue(dst, "TargetName", t.Name)
		for _, a := range t.Addresses {
			dst = AppendKeyValue(dst, "TargetAddress", a)
		}
	}
	return dst
}

// ParseSendTargets parses a SendTargets response (all continuation PDUs
// joined). Keys other than TargetName, TargetAddress and TargetAlias are an
// error, as are addresses before the first name.
func ParseSendTargets(text []byte) ([]TargetRecord, error) {
	kvs, err := ParseText(text)
	if err != nil {
		return nil, err
	}
	var out []TargetRecord
	for _, kv := range kvs {
		switch kv.Key {
		case "TargetName":
			out = append(out, TargetRecord{Name: kv.Value})
		case "TargetAddress":
			if len(out) == 0 {
				return nil, fmt.Errorf("%w: TargetAddress before TargetName", errSendTargetsFmt)
			}
			if _, _, _, _, err := ParseTargetAddress(kv.Value); err != nil {
				return nil, err
			}
			out[len(out)-1].Addresses = append(out[len(out)-1].Addresses, kv.Value)
		case "TargetAlias":
		default:
			return nil, fmt.Errorf("%w: %s=%s", errSendTargetsFmt, kv.Key, kv.Value)
		}
	}
	return out, nil
}

// validISCSIName checks the type prefix of an iSCSI name (iqn., eui.,
// naa.) and its length (223 bytes, RFC 7143 section 4.2.7.1).
func validISCSIName(s string) bool {
	if len(s) < 5 || len(s) > 223 {
		return false
	}
	p := strings.ToLower(s[:4])
	return p == "iqn." || p == "eui." || p == "naa."
}

// TextResponder is the target side of Text Request exchanges in full
// feature phase: it answers SendTargets (discovery and normal sessions),
// answers other keys NotUnderstood or Reject, and splits a long response
// over several Text Responses (C bit, Target Transfer Tag) within the
// initiator's MaxRecvDataSegmentLength. It joins continued requests (C
// bit) the same way. One TextResponder serves one connection; it is not
// safe for concurrent use.
type TextResponder struct {
	// Targets answers a SendTargets query: "All" (every target the
	// initiator may see) or one target name. It may return nothing.
	Targets func(query string) []TargetRecord
	// SessionType and SessionTarget (the normal session's target name)
	// tell what "SendTargets=" (empty) means.
	SessionType   SessionType
	SessionTarget string
	// MaxSendDataSegmentLength is the initiator's
	// MaxRecvDataSegmentLength (Params.MaxSendDataSegmentLength).
	MaxSendDataSegmentLength int

	pending []byte // response text not yet sent
	in      []byte // continued request text
	ttt     uint32 // TTT of the exchange in progress
	itt     uint32
	active  bool
	nextTTT uint32
}

// Respond processes one Text Request (req its BHS, data its data segment)
// and writes the response text into rspData (MaxSendDataSegmentLength bytes
// suffice). It returns the response header fields to send: Final,
// Continue, LUN, ITT and TTT are set; the caller fills StatSN, ExpCmdSN and
// MaxCmdSN, encodes the TextResponse and sends it. An error means the
// request is malformed or does not belong to the exchange in progress:
// answer it with a Reject (RejectProtocolError).
func (r *TextResponder) Respond(req TextRequest, data []byte, rspData []byte) (TextResponseFields, int, error) {
	f := TextResponseFields{LUN: BHS(req).LUN(), ITT: BHS(req).ITT(), TTT: ReservedTag}
	max := r.MaxSendDataSegmentLength
	if max <= 0 || max > len(rspData) {
		max = len(rspData)
	}
	if req.TTT() != ReservedTag {
		if !r.active || req.TTT() != r.ttt || BHS(req).ITT() != r.itt {
			return f, 0, fmt.Errorf("%w: TTT %#x does not continue an exchange", errTextResponse, req.TTT())
		}
	} else {
		// A new exchange (TTT all ones) ends any previous one.
		r.reset()
	}
	if req.Continue() && req.BHS().Final() {
		return f, 0, fmt.Errorf("%w: both C and F set", errTextResponse)
	}
	if len(r.in)+len(data) > MaxNegotiationText {
		r.reset()
		return f, 0, errTextTooLong
	}
	if len(r.pending) == 0 {
		r.in = append(r.in, data...)
		if req.Continue() {
			// More request text follows: acknowledge with an empty
			// response that carries the TTT to echo.
			if !r.active {
				r.begin(BHS(req).ITT())
			}
			f.TTT = r.ttt
			return f, 0, nil
		}
		text, err := r.answer(r.in)
		r.in = r.in[:0]
		if err != nil {
			r.reset()
			return f, 0, err
		}
		r.pending = text
	} else if len(data) > 0 {
		return f, 0, fmt.Errorf("%w: request text while a response is pending", errTextResponse)
	}
	n := copy(rspData[:max], r.pending)
	r.pending = r.pending[n:]
	if len(r.pending) > 0 {
		if !r.active {
			r.begin(BHS(req).ITT())
		}
		f.Continue, f.TTT = true, r.ttt
		return f, n, nil
	}
	r.reset()
	f.Final = true
	return f, n, nil
}

func (r *TextResponder) begin(itt uint32) {
	r.active, r.itt = true, itt
	r.nextTTT++
	if r.nextTTT == ReservedTag {
		r.nextTTT = 1
	}
	r.ttt = r.nextTTT
}

func (r *TextResponder) reset() {
	r.active = false
	r.pending = nil
	r.in = r.in[:0]
}

// answer builds the response text for a complete request.
func (r *TextResponder) answer(text []byte) ([]byte, error) {
	kvs, err := ParseText(text)
	if err != nil {
		return nil, err
	}
	var out []byte
	seen := map[string]bool{}
	for _, kv := range kvs {
		if seen[kv.Key] {
			return nil, fmt.Errorf("%w: %s", errDuplicateKey, kv.Key)
		}
		seen[kv.Key] = true
		id, known := lookupKey(kv.Key)
		switch {
		case known && id == kSendTargets:
			q := kv.Value
			switch {
			case q == "All":
			case q == "" && r.SessionType == SessionNormal:
				q = r.SessionTarget
			case validISCSIName(q):
			default:
				out = AppendKeyValue(out, kv.Key, ValueReject)
				continue
			}
			if r.Targets != nil {
				out = AppendSendTargets(out, r.Targets(q))
			}
		case !known:
			out = AppendKeyValue(out, kv.Key, ValueNotUnderstood)
		case def(id).stages&inFullFeature == 0 || def(id).senders&fromInitiator == 0:
			out = AppendKeyValue(out, kv.Key, ValueReject)
		default:
			// Declarations allowed in full feature phase
			// (MaxRecvDataSegmentLength, InitiatorAlias) are not
			// renegotiated by this target.
			out = AppendKeyValue(out, kv.Key, ValueReject)
		}
	}
	return out, nil
}
