package auth

import (
	"crypto/rand"
	"encoding/binary"
	"sync"
)

// SeqCounter hands out DH-HMAC-CHAP sequence numbers (S1 for a controller's
// challenges, S2 for a host's) as Linux's nvme_auth_get_seqnum does: a
// random start, then one more for every challenge, never 0 (0 in a Reply
// means "no controller authentication").
//
// Linux keeps one counter for the whole kernel; share one SeqCounter among
// the Hosts (or Controllers) of a process or a controller to get the same
// property, that a peer never sees a number repeat. The zero value is ready
// to use, and a SeqCounter is safe for concurrent use; it must not be copied
// after first use.
type SeqCounter struct {
	mu sync.Mutex
	n  uint32
}

// Next returns the next sequence number, never 0.
func (c *SeqCounter) Next() uint32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == 0 {
		var b [4]byte
		rand.Read(b[:]) // never fails (crypto/rand panics instead)
		c.n = binary.LittleEndian.Uint32(b[:])
	} else {
		c.n++
	}
	if c.n == 0 {
		c.n++
	}
	return c.n
}
