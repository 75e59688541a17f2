package auth

import (
	"crypto/sha256"
	"crypto/sha512"
	"fmt"
	"hash"
)

// Values of the Authentication Send/Receive command fields for DH-HMAC-CHAP,
// as the Linux host sets them (nvme_auth_submit) and nvmet checks them
// (nvmet_execute_auth_send/receive reject anything else with Invalid Field).
const (
	SECP  uint8 = 0xe9 // NVME_AUTH_DHCHAP_PROTOCOL_IDENTIFIER
	SPSP0 uint8 = 0x01
	SPSP1 uint8 = 0x01
)

// AuthType is the auth_type byte that starts every message.
type AuthType uint8

// Message classes (NVME_AUTH_COMMON_MESSAGES, NVME_AUTH_DHCHAP_MESSAGES).
const (
	TypeCommon AuthType = 0x00 // AUTH_Negotiate, AUTH_Failure1/2
	TypeDHCHAP AuthType = 0x01 // DH-HMAC-CHAP_Challenge, _Reply, _Success1/2
)

// String returns "common" or "dh-hmac-chap".
func (t AuthType) String() string {
	switch t {
	case TypeCommon:
		return "common"
	case TypeDHCHAP:
		return "dh-hmac-chap"
	}
	return fmt.Sprintf("auth type %#02x", uint8(t))
}

// MessageID is the auth_id byte (NVME_AUTH_DHCHAP_MESSAGE_*).
type MessageID uint8

// Message identifiers.
const (
	MsgNegotiate MessageID = 0x00 // common
	MsgChallenge MessageID = 0x01 // DH-HMAC-CHAP
	MsgReply     MessageID = 0x02 // DH-HMAC-CHAP
	MsgSuccess1  MessageID = 0x03 // DH-HMAC-CHAP
	MsgSuccess2  MessageID = 0x04 // DH-HMAC-CHAP
	MsgFailure2  MessageID = 0xf0 // common, host to controller
	MsgFailure1  MessageID = 0xf1 // common, controller to host
)

// String returns the message's name as the specification writes it.
func (m MessageID) String() string {
	switch m {
	case MsgNegotiate:
		return "AUTH_Negotiate"
	case MsgChallenge:
		return "DH-HMAC-CHAP_Challenge"
	case MsgReply:
		return "DH-HMAC-CHAP_Reply"
	case MsgSuccess1:
		return "DH-HMAC-CHAP_Success1"
	case MsgSuccess2:
		return "DH-HMAC-CHAP_Success2"
	case MsgFailure2:
		return "AUTH_Failure2"
	case MsgFailure1:
		return "AUTH_Failure1"
	}
	return fmt.Sprintf("auth message %#02x", uint8(m))
}

// AuthIDDHCHAP is the authid of a DH-HMAC-CHAP protocol descriptor
// (NVME_AUTH_DHCHAP_AUTH_ID).
const AuthIDDHCHAP uint8 = 0x01

// Secure channel concatenation values of AUTH_Negotiate's SC_C byte
// (NVME_AUTH_SECP_*). This package implements only SCCNone: a controller
// answers anything else with FailureConcatMismatch, as nvmet does without
// TLS.
const (
	SCCNone       uint8 = 0x00 // NVME_AUTH_SECP_NOSC
	SCCSC         uint8 = 0x01 // NVME_AUTH_SECP_SC
	SCCNewTLSPSK  uint8 = 0x02 // NVME_AUTH_SECP_NEWTLSPSK
	SCCReplacePSK uint8 = 0x03 // NVME_AUTH_SECP_REPLACETLSPSK
)

// HashID identifies a hash function (NVME_AUTH_HASH_*). In a DHHC-1 secret
// the same numbers name the key transformation, with 0 for none.
type HashID uint8

// Hash functions. HashNone is valid only in a secret (no transformation).
const (
	HashNone   HashID = 0x00
	HashSHA256 HashID = 0x01
	HashSHA384 HashID = 0x02
	HashSHA512 HashID = 0x03
)

// AllHashes returns the hash functions in the order the Linux host offers
// them in its AUTH_Negotiate (nvme_auth_set_dhchap_negotiate_data). The
// slice is new on every call.
func AllHashes() []HashID { return []HashID{HashSHA256, HashSHA384, HashSHA512} }

// String returns "sha256", "sha384", "sha512", "none" or the number.
func (h HashID) String() string {
	switch h {
	case HashNone:
		return "none"
	case HashSHA256:
		return "sha256"
	case HashSHA384:
		return "sha384"
	case HashSHA512:
		return "sha512"
	}
	return fmt.Sprintf("hash %#02x", uint8(h))
}

// Size returns the digest length in bytes (32, 48, 64), or 0 for HashNone
// and unknown identifiers (nvme_auth_hmac_hash_len).
func (h HashID) Size() int {
	switch h {
	case HashSHA256:
		return sha256.Size
	case HashSHA384:
		return sha512.Size384
	case HashSHA512:
		return sha512.Size
	}
	return 0
}

// Valid reports whether h is SHA-256, SHA-384 or SHA-512.
func (h HashID) Valid() bool { return h.Size() != 0 }

// New returns a new hash.Hash for h; h must be Valid.
func (h HashID) New() hash.Hash {
	switch h {
	case HashSHA256:
		return sha256.New()
	case HashSHA384:
		return sha512.New384()
	case HashSHA512:
		return sha512.New()
	}
	panic("auth: HashID.New on " + h.String())
}

// DHGroupID identifies a Diffie-Hellman group (NVME_AUTH_DHGROUP_*).
type DHGroupID uint8

// DH groups: the null group (no Diffie-Hellman exchange) and the RFC 7919
// finite field groups.
const (
	DHGroupNull      DHGroupID = 0x00
	DHGroupFFDHE2048 DHGroupID = 0x01
	DHGroupFFDHE3072 DHGroupID = 0x02
	DHGroupFFDHE4096 DHGroupID = 0x03
	DHGroupFFDHE6144 DHGroupID = 0x04
	DHGroupFFDHE8192 DHGroupID = 0x05
)

// AllDHGroups returns the groups in the order the Linux host offers them.
// The slice is new on every call.
func AllDHGroups() []DHGroupID {
	return []DHGroupID{DHGroupNull, DHGroupFFDHE2048, DHGroupFFDHE3072,
		DHGroupFFDHE4096, DHGroupFFDHE6144, DHGroupFFDHE8192}
}

// String returns "null", "ffdhe2048" ... "ffdhe8192" (Linux's names) or the
// number.
func (g DHGroupID) String() string {
	switch g {
	case DHGroupNull:
		return "null"
	case DHGroupFFDHE2048:
		return "ffdhe2048"
	case DHGroupFFDHE3072:
		return "ffdhe3072"
	case DHGroupFFDHE4096:
		return "ffdhe4096"
	case DHGroupFFDHE6144:
		return "ffdhe6144"
	case DHGroupFFDHE8192:
		return "ffdhe8192"
	}
	return fmt.Sprintf("dhgroup %#02x", uint8(g))
}

// Valid reports whether g is one of the six defined groups.
func (g DHGroupID) Valid() bool { return g <= DHGroupFFDHE8192 }

// ParseHashName returns the HashID named "sha256", "sha384", "sha512" or
// Linux's "hmac(sha256)" form (as nvmet's dhchap_hash attribute holds it).
func ParseHashName(s string) (HashID, error) {
	for _, h := range AllHashes() {
		if s == h.String() || s == "hmac("+h.String()+")" {
			return h, nil
		}
	}
	return 0, fmt.Errorf("auth: unknown hash %q (want sha256, sha384 or sha512)", s)
}

// ParseDHGroupName returns the DHGroupID named "null" or "ffdheNNNN".
func ParseDHGroupName(s string) (DHGroupID, error) {
	for _, g := range AllDHGroups() {
		if s == g.String() {
			return g, nil
		}
	}
	return 0, fmt.Errorf("auth: unknown DH group %q (want null, ffdhe2048, ffdhe3072, ffdhe4096, ffdhe6144 or ffdhe8192)", s)
}

// FailureCode is the reason code explanation (rescode_exp) of an
// AUTH_Failure1 or AUTH_Failure2 message (NVME_AUTH_DHCHAP_FAILURE_*). It
// implements error so that errors.Is(err, auth.FailureFailed) tells why an
// exchange failed.
type FailureCode uint8

// Reason code explanations.
const (
	FailureFailed            FailureCode = 0x01 // authentication failed (wrong response, missing key)
	FailureNotUsable         FailureCode = 0x02 // authentication protocol not usable
	FailureConcatMismatch    FailureCode = 0x03 // secure channel concatenation mismatch
	FailureHashUnusable      FailureCode = 0x04 // hash function not usable
	FailureDHGroupUnusable   FailureCode = 0x05 // DH group not usable
	FailureIncorrectPayload  FailureCode = 0x06 // incorrect payload
	FailureIncorrectProtocol FailureCode = 0x07 // incorrect protocol message (NVME_AUTH_DHCHAP_FAILURE_INCORRECT_MESSAGE)
)

// String returns the explanation's meaning.
func (c FailureCode) String() string {
	switch c {
	case FailureFailed:
		return "authentication failed"
	case FailureNotUsable:
		return "authentication protocol not usable"
	case FailureConcatMismatch:
		return "secure channel concatenation mismatch"
	case FailureHashUnusable:
		return "hash function not usable"
	case FailureDHGroupUnusable:
		return "DH group not usable"
	case FailureIncorrectPayload:
		return "incorrect payload"
	case FailureIncorrectProtocol:
		return "incorrect protocol message"
	}
	return fmt.Sprintf("failure reason %#02x", uint8(c))
}

// Error returns String, so a FailureCode can be an errors.Is target.
func (c FailureCode) Error() string { return c.String() }

// ReasonFailed is the only reason code (rescode) defined: "authentication
// failure" (NVME_AUTH_DHCHAP_FAILURE_REASON_FAILED). The detail is in the
// FailureCode.
const ReasonFailed uint8 = 0x01

// checkIDs returns an error naming the first unknown hash or group of a
// configuration; what says whose list it is ("host config offers").
func checkIDs(what string, hashes []HashID, groups []DHGroupID) error {
	for _, id := range hashes {
		if !id.Valid() {
			return fmt.Errorf("auth: %s unknown %s", what, id)
		}
	}
	for _, id := range groups {
		if !id.Valid() {
			return fmt.Errorf("auth: %s unknown %s", what, id)
		}
	}
	return nil
}

// transformKeys returns the host's transformed key (with the host NQN) and,
// when a controller secret is set, the controller's (with the subsystem
// NQN), as both sides of an exchange need them.
func transformKeys(s Secret, cs *Secret, hostNQN, subsysNQN string) (host, ctrl []byte) {
	host = s.TransformedKey(hostNQN)
	if cs != nil {
		ctrl = cs.TransformedKey(subsysNQN)
	}
	return host, ctrl
}
