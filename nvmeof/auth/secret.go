package auth

import (
	"crypto/hmac"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"strings"
)

// secretPrefix starts every DH-HMAC-CHAP secret in its textual form.
const secretPrefix = "DHHC-1:"

// transformSeed is appended to the NQN in the key transformation
// (nvme_auth_transform_key) and in nvme gen-dhchap-key.
const transformSeed = "NVMe-over-Fabrics"

// Secret is a DH-HMAC-CHAP secret: the key a host (or, for bidirectional
// authentication, a controller) proves it knows, and the hash that
// transforms it with the owner's NQN before use.
//
// Its textual form, as nvme-cli, libnvme, Linux's nvme-fabrics options and
// nvmet's configfs dhchap_key attributes hold it, is
//
//	DHHC-1:hh:base64(key || CRC-32(key) little-endian):
//
// with hh = 00 (no transformation), 01 (SHA-256), 02 (SHA-384) or 03
// (SHA-512). The CRC is the IEEE CRC-32 of zlib, crc32.ChecksumIEEE (Linux
// computes it as ~crc32(~0, key, len), nvme-cli with zlib's crc32).
//
// A Secret is a plain value; methods never modify it. Key is not copied by
// ParseSecret's callers: do not modify it while a Host or Controller built
// from it is in use.
type Secret struct {
	// Transform is the hash of the key transformation (hh): HashNone,
	// HashSHA256, HashSHA384 or HashSHA512.
	Transform HashID
	// Key is the secret key, 32, 48 or 64 bytes. With a transformation
	// its length is the hash's digest size, as nvme-cli enforces.
	Key []byte
}

// ErrInvalidSecret is wrapped by every error that ParseSecret, NewSecret and
// GenerateSecret return for a malformed or unusable secret. The errors name
// what is wrong but never include the secret's characters.
const ErrInvalidSecret = errorString("invalid DH-HMAC-CHAP secret")

// ParseSecret parses the DHHC-1 form of a secret. It checks, in order, the
// "DHHC-1:" prefix, the two-digit transformation, the base64 (standard
// alphabet with padding), the decoded length (36, 52 or 68 bytes: a 32, 48
// or 64-byte key and its CRC), the CRC-32, and that a transformed key is as
// long as its hash (nvme check-dhchap-key's rule). The final ':' may be
// omitted, as Linux accepts it. Leading or trailing white space is an error;
// ReadSecretFile trims it. The returned Key is a new slice.
func ParseSecret(s string) (Secret, error) {
	if strings.TrimSpace(s) != s {
		return Secret{}, fmt.Errorf("%w: leading or trailing white space", ErrInvalidSecret)
	}
	rest, ok := strings.CutPrefix(s, secretPrefix)
	if !ok {
		return Secret{}, fmt.Errorf("%w: does not start with %q", ErrInvalidSecret, secretPrefix)
	}
	if len(rest) < 3 || rest[2] != ':' {
		return Secret{}, fmt.Errorf("%w: want two digits and ':' after %q (DHHC-1:hh:<base64>:)", ErrInvalidSecret, secretPrefix)
	}
	var t HashID
	switch rest[:2] {
	case "00":
		t = HashNone
	case "01":
		t = HashSHA256
	case "02":
		t = HashSHA384
	case "03":
		t = HashSHA512
	default:
		return Secret{}, fmt.Errorf("%w: key transformation %q unknown (want 00 none, 01 SHA-256, 02 SHA-384 or 03 SHA-512)", ErrInvalidSecret, rest[:2])
	}
	b64 := strings.TrimSuffix(rest[3:], ":")
	if strings.ContainsRune(b64, ':') {
		return Secret{}, fmt.Errorf("%w: more than one ':' after the key", ErrInvalidSecret)
	}
	if b64 == "" {
		return Secret{}, fmt.Errorf("%w: empty key", ErrInvalidSecret)
	}
	raw, err := base64.StdEncoding.Strict().DecodeString(b64)
	if err != nil {
		// The error names only a byte offset, not the characters.
		return Secret{}, fmt.Errorf("%w: key is not valid base64: %v", ErrInvalidSecret, err)
	}
	n := len(raw) - 4
	if n != 32 && n != 48 && n != 64 {
		return Secret{}, fmt.Errorf("%w: key decodes to %d bytes; want 36, 52 or 68 (a 32, 48 or 64-byte key and its 4-byte CRC-32)", ErrInvalidSecret, len(raw))
	}
	key, tail := raw[:n], raw[n:]
	if got, want := binary.LittleEndian.Uint32(tail), crc32.ChecksumIEEE(key); got != want {
		return Secret{}, fmt.Errorf("%w: CRC-32 mismatch (secret carries %08x, key's CRC-32 is %08x): mistyped or truncated secret", ErrInvalidSecret, got, want)
	}
	if t != HashNone && n != t.Size() {
		return Secret{}, fmt.Errorf("%w: a DHHC-1:%s (%s) secret holds a %d-byte key, this one %d bytes", ErrInvalidSecret, rest[:2], t, t.Size(), n)
	}
	return Secret{Transform: t, Key: key}, nil
}

// String returns the DHHC-1 form, "DHHC-1:hh:<base64>:", as nvme
// gen-dhchap-key prints it. It is the secret itself: do not log it.
func (s Secret) String() string {
	b := make([]byte, 0, len(s.Key)+4)
	b = append(b, s.Key...)
	b = binary.LittleEndian.AppendUint32(b, crc32.ChecksumIEEE(s.Key))
	return fmt.Sprintf("%s%02x:%s:", secretPrefix, uint8(s.Transform), base64.StdEncoding.EncodeToString(b))
}

// Validate reports whether s could have come from ParseSecret: a known
// transformation and a key of 32, 48 or 64 bytes (the hash's size when
// transformed).
func (s Secret) Validate() error {
	if s.Transform != HashNone && !s.Transform.Valid() {
		return fmt.Errorf("%w: key transformation %s unknown", ErrInvalidSecret, s.Transform)
	}
	switch n := len(s.Key); {
	case n != 32 && n != 48 && n != 64:
		return fmt.Errorf("%w: key is %d bytes; want 32, 48 or 64", ErrInvalidSecret, n)
	case s.Transform != HashNone && n != s.Transform.Size():
		return fmt.Errorf("%w: a %s-transformed key must be %d bytes, this one is %d", ErrInvalidSecret, s.Transform, s.Transform.Size(), n)
	}
	return nil
}

// TransformedKey returns the key as it is used as the HMAC key of the
// responses: for Transform HashNone a copy of Key, otherwise
// HMAC-Transform(Key, nqn || "NVMe-over-Fabrics"), exactly as Linux's
// nvme_auth_transform_key. nqn is the owner's NQN: the host NQN for a host
// secret, the subsystem NQN for a controller secret. It returns a new slice.
func (s Secret) TransformedKey(nqn string) []byte {
	return transformKey(s.Key, s.Transform, nqn)
}

func transformKey(key []byte, t HashID, nqn string) []byte {
	if t == HashNone {
		return append([]byte(nil), key...)
	}
	m := hmac.New(t.New, key)
	io.WriteString(m, nqn)
	io.WriteString(m, transformSeed)
	return m.Sum(nil)
}

// NewSecret makes the secret that "nvme gen-dhchap-key --secret=<raw hex>
// --hmac=<transform> --nqn=<nqn>" prints: for HashNone raw itself,
// otherwise raw transformed with nqn (so the stored key is already
// HMAC(raw, nqn || "NVMe-over-Fabrics"), and it is transformed once more at
// use). raw must be 32, 48 or 64 bytes, and as long as the hash when
// transformed. raw is not retained.
func NewSecret(raw []byte, transform HashID, nqn string) (Secret, error) {
	s := Secret{Transform: transform, Key: raw}
	if err := s.Validate(); err != nil {
		return Secret{}, err
	}
	if transform != HashNone && nqn == "" {
		return Secret{}, fmt.Errorf("%w: a transformed secret needs the NQN of its owner", ErrInvalidSecret)
	}
	s.Key = transformKey(raw, transform, nqn)
	return s, nil
}

// GenerateSecret makes a new random secret as "nvme gen-dhchap-key
// --hmac=<transform> --key-length=<keyLen> --nqn=<nqn>" does. keyLen 0
// means 32 bytes for HashNone and the hash's size otherwise; nqn is needed
// when transform is not HashNone (nvme-cli then falls back to
// /etc/nvme/hostnqn; this function does not read files). rnd nil means
// crypto/rand.
func GenerateSecret(rnd io.Reader, transform HashID, keyLen int, nqn string) (Secret, error) {
	if rnd == nil {
		rnd = rand.Reader
	}
	if keyLen == 0 {
		keyLen = 32
		if transform != HashNone {
			keyLen = transform.Size()
		}
	}
	if err := (Secret{Transform: transform, Key: make([]byte, keyLen)}).Validate(); err != nil {
		return Secret{}, err
	}
	raw := make([]byte, keyLen)
	if _, err := io.ReadFull(rnd, raw); err != nil {
		return Secret{}, fmt.Errorf("generating secret: reading random bytes: %w", err)
	}
	s, err := NewSecret(raw, transform, nqn)
	clear(raw)
	return s, err
}

// ParseSecretOrFile reads a secret as configurations and flags give it:
// the DHHC-1 form itself, or "@FILE" to read it from FILE.
func ParseSecretOrFile(v string) (Secret, error) {
	if path, ok := strings.CutPrefix(v, "@"); ok {
		return ReadSecretFile(path)
	}
	return ParseSecret(v)
}

// ReadSecretFile reads a DHHC-1 secret from a file, trimming white space
// around it (a trailing newline, as "nvme gen-dhchap-key > file" leaves).
// Errors name the file but not its contents.
func ReadSecretFile(path string) (Secret, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Secret{}, fmt.Errorf("reading DH-HMAC-CHAP secret: %w", err)
	}
	s, err := ParseSecret(strings.TrimSpace(string(b)))
	clear(b)
	if err != nil {
		return Secret{}, fmt.Errorf("reading DH-HMAC-CHAP secret from %s: %w", path, err)
	}
	return s, nil
}
