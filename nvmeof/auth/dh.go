package auth

import (
	"crypto/hmac"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"math/big"
)

// group returns the prime of g and the bit length of the private exponents
// this package draws for it, or ok false for the null group and unknown
// identifiers. The exponent sizes are RFC 7919 section 5.2's "short
// exponent" sizes (twice the group's security strength, rounded up); Linux's
// dh_safe_prime uses similar ones, and the peer cannot tell.
func (g DHGroupID) group() (p *big.Int, expBits int, ok bool) {
	var hex string
	switch g {
	case DHGroupFFDHE2048:
		hex, expBits = ffdhe2048P, 225
	case DHGroupFFDHE3072:
		hex, expBits = ffdhe3072P, 275
	case DHGroupFFDHE4096:
		hex, expBits = ffdhe4096P, 325
	case DHGroupFFDHE6144:
		hex, expBits = ffdhe6144P, 375
	case DHGroupFFDHE8192:
		hex, expBits = ffdhe8192P, 400
	default:
		return nil, 0, false
	}
	p, _ = new(big.Int).SetString(hex, 16)
	return p, expBits, true
}

// Prime returns a new copy of the group's prime p (the generator is 2), or
// nil for the null group and unknown identifiers.
func (g DHGroupID) Prime() *big.Int {
	p, _, _ := g.group()
	return p
}

// PublicValueSize returns the length of the group's public values and
// shared secrets in bytes (the prime's length: 256 for ffdhe2048 ... 1024
// for ffdhe8192, crypto_kpp_maxsize in Linux), 0 for the null group.
func (g DHGroupID) PublicValueSize() int {
	switch g {
	case DHGroupFFDHE2048:
		return 256
	case DHGroupFFDHE3072:
		return 384
	case DHGroupFFDHE4096:
		return 512
	case DHGroupFFDHE6144:
		return 768
	case DHGroupFFDHE8192:
		return 1024
	}
	return 0
}

// errBadPublicValue is wrapped when a peer's DH value is out of range.
const errBadPublicValue = errorString("DH public value invalid")

// DHKey is an ephemeral finite field Diffie-Hellman key pair of one RFC
// 7919 group. It is immutable after creation and safe for concurrent use.
//
// The arithmetic is math/big's, which is not constant time; the keys are
// fresh for every exchange, which limits what a timing observer can gather.
type DHKey struct {
	group DHGroupID
	p     *big.Int
	x     *big.Int
	pub   []byte
}

// GenerateDHKey draws a private exponent for group g from rnd (nil means
// crypto/rand) and computes the public value 2^x mod p.
func GenerateDHKey(g DHGroupID, rnd io.Reader) (*DHKey, error) {
	p, bits, ok := g.group()
	if !ok {
		return nil, fmt.Errorf("generating DH key: %s is not a finite field group", g)
	}
	if rnd == nil {
		rnd = rand.Reader
	}
	buf := make([]byte, (bits+7)/8)
	for {
		if _, err := io.ReadFull(rnd, buf); err != nil {
			return nil, fmt.Errorf("generating DH key: reading random bytes: %w", err)
		}
		buf[0] &= byte(0xff >> (8*len(buf) - bits))
		x := new(big.Int).SetBytes(buf)
		clear(buf)
		if x.Cmp(big.NewInt(1)) > 0 {
			return newDHKey(g, p, x), nil
		}
	}
}

// NewDHKey makes a key pair from a known private exponent (big-endian), for
// known-answer tests. priv must be in [2, (p-1)/2).
func NewDHKey(g DHGroupID, priv []byte) (*DHKey, error) {
	p, _, ok := g.group()
	if !ok {
		return nil, fmt.Errorf("DH key: %s is not a finite field group", g)
	}
	x := new(big.Int).SetBytes(priv)
	q := new(big.Int).Rsh(p, 1)
	if x.Cmp(big.NewInt(1)) <= 0 || x.Cmp(q) >= 0 {
		return nil, fmt.Errorf("DH key: private exponent out of range [2, q)")
	}
	return newDHKey(g, p, x), nil
}

func newDHKey(g DHGroupID, p, x *big.Int) *DHKey {
	y := new(big.Int).Exp(big.NewInt(2), x, p)
	return &DHKey{group: g, p: p, x: x, pub: y.FillBytes(make([]byte, g.PublicValueSize()))}
}

// Group returns the key's group.
func (k *DHKey) Group() DHGroupID { return k.group }

// PublicValue returns 2^x mod p, big-endian and left-padded to the prime's
// length, as Linux's kpp generates it. The slice is shared: do not modify.
func (k *DHKey) PublicValue() []byte { return k.pub }

// SharedSecret returns peer^x mod p, big-endian and left-padded to the
// prime's length (Linux's kpp output; OpenSSL with dh_pad 1). peer is the
// other side's public value, big-endian of any length up to the prime's (a
// peer may strip leading zeros); it must satisfy 1 < peer < p-1 and lie in
// the prime-order subgroup (Legendre symbol 1, Linux's peer check
// peer^q = 1 mod p done the cheap way), else the error wraps
// errBadPublicValue.
func (k *DHKey) SharedSecret(peer []byte) ([]byte, error) {
	if len(peer) == 0 || len(peer) > k.group.PublicValueSize() {
		return nil, fmt.Errorf("%w: %d bytes for %s (want 1 to %d)", errBadPublicValue, len(peer), k.group, k.group.PublicValueSize())
	}
	y := new(big.Int).SetBytes(peer)
	pm1 := new(big.Int).Sub(k.p, big.NewInt(1))
	if y.Cmp(big.NewInt(1)) <= 0 || y.Cmp(pm1) >= 0 {
		return nil, fmt.Errorf("%w: not in (1, p-1)", errBadPublicValue)
	}
	if big.Jacobi(y, k.p) != 1 {
		return nil, fmt.Errorf("%w: not in the prime-order subgroup", errBadPublicValue)
	}
	z := new(big.Int).Exp(y, k.x, k.p)
	if z.Cmp(big.NewInt(1)) <= 0 {
		return nil, errors.New("DH shared secret degenerate")
	}
	return z.FillBytes(make([]byte, k.group.PublicValueSize())), nil
}

// AugmentedChallenge returns the challenge a response is computed over
// when a DH group is in use, exactly as Linux's
// nvme_auth_augmented_challenge: HMAC-h(H-h(sessionKey), challenge), where
// sessionKey is the DH shared secret (padded to the prime's length) and
// challenge is C1 or C2. h must be Valid; the result is h.Size() bytes.
func AugmentedChallenge(h HashID, sessionKey, challenge []byte) []byte {
	d := h.New()
	d.Write(sessionKey)
	hashedKey := d.Sum(nil)
	m := hmac.New(h.New, hashedKey)
	m.Write(challenge)
	clear(hashedKey)
	return m.Sum(nil)
}
