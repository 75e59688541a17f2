package nvmeof

import (
	"bytes"
	"fmt"
	"strings"
)

// putPadded writes s into field and fills the rest with pad. With ascii, s
// must be printable ASCII (the SN, MN and FR fields of Identify Controller).
// The caller has checked the length with checkPadded.
func putPadded(field []byte, s string, pad byte) {
	n := copy(field, s)
	for i := n; i < len(field); i++ {
		field[i] = pad
	}
}

// checkPadded validates s for a field of n bytes.
func checkPadded(s string, n int, ascii bool) error {
	if len(s) > n {
		return fmt.Errorf("%w: %d bytes, field holds %d", errStringTooLong, len(s), n)
	}
	if ascii {
		for i := 0; i < len(s); i++ {
			if s[i] < 0x20 || s[i] > 0x7e {
				return fmt.Errorf("%w: byte %#02x at %d", errStringNotASCII, s[i], i)
			}
		}
	}
	return nil
}

// checkNQNField validates an NQN for a 256-byte field that a parser reads
// leniently (Identify SUBNQN, discovery log SUBNQN): it may be empty.
func checkNQNField(s string) error {
	switch {
	case len(s) > MaxNQNLength:
		return fmt.Errorf("%w: %d bytes", errNQNTooLong, len(s))
	case strings.IndexByte(s, 0) >= 0:
		return errNQNHasNUL
	}
	return nil
}

// trimField returns the field as a string without trailing NULs and spaces:
// it reads space-padded (SN, MN, FR, TRADDR as SPDK pads them) and
// NUL-padded (NQNs, TRADDR as Linux nvmet pads it) fields alike. Content
// after a NUL is dropped.
func trimField(b []byte) string {
	if n := bytes.IndexByte(b, 0); n >= 0 {
		b = b[:n]
	}
	return string(bytes.TrimRight(b, " "))
}
