package iser

import (
	"bytes"
	"fmt"
)

// Text format limits (RFC 7143 section 6.1).
const (
	// MaxKeyLength is the longest key name (Linux KEY_MAXLEN 64 with the
	// separator).
	MaxKeyLength = 63
	// MaxValueLength is the longest simple value (Linux VALUE_MAXLEN).
	MaxValueLength = 255
	// MaxLargeValueLength bounds the encoded binary values of the
	// authentication keys (CHAP_C, CHAP_R), the longest values this
	// package accepts at all.
	MaxLargeValueLength = 8192
	// MaxNegotiationText bounds the key=value text one side accumulates
	// over the PDUs of one login stage or text exchange (C bit
	// continuations).
	MaxNegotiationText = 64 * 1024
)

// Special values (RFC 7143 section 6.2).
const (
	ValueNotUnderstood = "NotUnderstood"
	ValueReject        = "Reject"
	ValueIrrelevant    = "Irrelevant"
	ValueYes           = "Yes"
	ValueNo            = "No"
	ValueNone          = "None"
)

// KeyValue is one key=value pair.
type KeyValue struct {
	Key   string
	Value string
}

// NextKeyValue returns the first key=value pair of a text data segment and
// the text after its NUL. Key and value are views into text. Empty pairs
// (stray NULs) are skipped. At the end of the text it returns nil key and
// rest. It checks the framing only: the '=' and the terminating NUL, which
// RFC 7143 requires after every pair, the last included.
func NextKeyValue(text []byte) (key, value, rest []byte, err error) {
	for len(text) > 0 && text[0] == 0 {
		text = text[1:]
	}
	if len(text) == 0 {
		return nil, nil, nil, nil
	}
	end := bytes.IndexByte(text, 0)
	if end < 0 {
		return nil, nil, nil, fmt.Errorf("%w: pair not NUL-terminated", errTextFormat)
	}
	pair := text[:end]
	eq := bytes.IndexByte(pair, '=')
	if eq < 0 {
		return nil, nil, nil, fmt.Errorf("%w: no '=' in %.40q", errTextFormat, pair)
	}
	return pair[:eq], pair[eq+1:], text[end+1:], nil
}

// validKey checks a key name: 1 to 63 characters of the RFC 7143
// standard-label set (letters, digits, '.', '-', '+', '@', '_'), plus '#'
// for X# extension keys.
func validKey(k []byte) bool {
	if len(k) == 0 || len(k) > MaxKeyLength {
		return false
	}
	for _, c := range k {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == '.', c == '-', c == '+', c == '@', c == '_', c == '#':
		default:
			return false
		}
	}
	return true
}

// ParseText parses a complete text data segment (all continuation PDUs
// joined) into pairs, checking key syntax and value lengths (255 bytes, or
// MaxLargeValueLength for the CHAP binary values). Duplicate keys are kept:
// the negotiation decides what a repeat means.
func ParseText(text []byte) ([]KeyValue, error) {
	var kvs []KeyValue
	for {
		k, v, rest, err := NextKeyValue(text)
		if err != nil {
			return nil, err
		}
		if k == nil {
			return kvs, nil
		}
		if !validKey(k) {
			return nil, fmt.Errorf("%w: %.70q", errTextKey, k)
		}
		limit := MaxValueLength
		if isLargeValueKey(k) {
			limit = MaxLargeValueLength
		}
		if len(v) > limit {
			return nil, fmt.Errorf("%w: %s has %d bytes, limit %d", errTextValueLength, k, len(v), limit)
		}
		kvs = append(kvs, KeyValue{Key: string(k), Value: string(v)})
		text = rest
	}
}

func isLargeValueKey(k []byte) bool {
	return string(k) == "CHAP_C" || string(k) == "CHAP_R"
}

// AppendKeyValue appends "key=value\x00" to dst.
func AppendKeyValue(dst []byte, key, value string) []byte {
	dst = append(dst, key...)
	dst = append(dst, '=')
	dst = append(dst, value...)
	return append(dst, 0)
}

// AppendText appends all pairs.
func AppendText(dst []byte, kvs []KeyValue) []byte {
	for _, kv := range kvs {
		dst = AppendKeyValue(dst, kv.Key, kv.Value)
	}
	return dst
}

// isExtensionKey reports a private or public extension key (X-, X#, and the
// Z- prefix some vendors use); they are answered NotUnderstood.
func isExtensionKey(k string) bool {
	return len(k) > 2 && (k[:2] == "X-" || k[:2] == "X#" || k[:2] == "Z-")
}

// isSpecialValue reports the three values that are only ever answers.
func isSpecialValue(v string) bool {
	return v == ValueNotUnderstood || v == ValueReject || v == ValueIrrelevant
}
