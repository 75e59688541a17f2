package iser

import (
	"crypto/md5"
	"crypto/subtle"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// CHAP as iSCSI uses it (RFC 7143 section 12.1.3, RFC 1994): the target
// sends CHAP_A (algorithm), CHAP_I (identifier) and CHAP_C (challenge); the
// initiator answers CHAP_N (its name) and CHAP_R = MD5(I || secret || C),
// and may challenge the target back with its own CHAP_I and CHAP_C (mutual
// CHAP), which the target answers with CHAP_N and CHAP_R.

// CHAPSecret is a CHAP identity: the name sent as CHAP_N and the shared
// secret.
type CHAPSecret struct {
	User   string
	Secret string
}

// CHAP parameters.
const (
	chapMD5 = "5" // CHAP_A value for MD5, the only algorithm supported
	// chapChallengeSize is the length of the challenges this package
	// sends, as Linux LIO (CHAP_CHALLENGE_LENGTH).
	chapChallengeSize = 16
	// maxCHAPChallenge bounds a received challenge (RFC 7143 section
	// 12.1.3 limits CHAP_C to 1024 bytes).
	maxCHAPChallenge = 1024
	authMethodCHAP   = "CHAP"
)

func isAuthKey(k string) bool { return strings.HasPrefix(k, "CHAP_") || k == "AuthMethod" }

// chapResponse computes MD5(id || secret || challenge).
func chapResponse(id uint8, secret string, challenge []byte) []byte {
	h := md5.New()
	h.Write([]byte{id})
	io.WriteString(h, secret)
	h.Write(challenge)
	return h.Sum(nil)
}

// chapVerify checks a received CHAP_N and CHAP_R in constant time.
func chapVerify(want CHAPSecret, id uint8, challenge []byte, name, response string) bool {
	r, ok := decodeBinary(response)
	if !ok {
		return false
	}
	expected := chapResponse(id, want.Secret, challenge)
	nameOK := subtle.ConstantTimeCompare([]byte(name), []byte(want.User))
	respOK := subtle.ConstantTimeCompare(r, expected)
	return nameOK&respOK == 1
}

// chapAlgorithms checks a CHAP_A list for MD5.
func chapAlgorithms(v string) bool {
	return slices.Contains(strings.Split(v, ","), chapMD5)
}

// parseCHAPI parses a CHAP identifier, 0 to 255.
func parseCHAPI(v string) (uint8, bool) {
	n, ok := parseNumber(v)
	if !ok || n > 255 {
		return 0, false
	}
	return uint8(n), true
}

// parseChallenge decodes a received CHAP_C.
func parseChallenge(v string) ([]byte, error) {
	c, ok := decodeBinary(v)
	if !ok || len(c) == 0 || len(c) > maxCHAPChallenge {
		return nil, fmt.Errorf("%w: malformed CHAP_C", errCHAP)
	}
	return c, nil
}

// newChallenge reads an identifier and a challenge from rand.
func newChallenge(rand io.Reader) (uint8, []byte, error) {
	var b [1 + chapChallengeSize]byte
	if _, err := io.ReadFull(rand, b[:]); err != nil {
		return 0, nil, fmt.Errorf("iser: reading CHAP challenge: %w", err)
	}
	return b[0], b[1:], nil
}

// authKeys splits the CHAP keys of a PDU off into a map, rejecting
// repeats (RFC 7143: a key must not appear twice in a negotiation step).
func authKeys(kvs []KeyValue) (auth map[string]string, rest []KeyValue, err error) {
	for _, kv := range kvs {
		if !isAuthKey(kv.Key) {
			rest = append(rest, kv)
			continue
		}
		if auth == nil {
			auth = make(map[string]string)
		}
		if _, dup := auth[kv.Key]; dup {
			return nil, nil, fmt.Errorf("%w: %s", errDuplicateKey, kv.Key)
		}
		auth[kv.Key] = kv.Value
	}
	return auth, rest, nil
}

func formatCHAPI(id uint8) string { return strconv.Itoa(int(id)) }
