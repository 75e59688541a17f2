package auth

import (
	"crypto/hmac"
	"encoding/binary"
	"io"
)

// HostResponse computes the host's response R1 to the controller's
// challenge, byte for byte as Linux's nvme_auth_dhchap_setup_host_response
// (host) and nvmet_auth_host_hash (controller):
//
//	R1 = HMAC-h(key, Ca || le32(seqNum) || le16(tid) || scc || "HostHost" ||
//	            hostNQN || 0x00 || subsysNQN)
//
// key is the host secret's TransformedKey(hostNQN); challenge is C1, or the
// AugmentedChallenge of C1 when a DH group is in use; seqNum is S1 from the
// Challenge; tid the transaction ID; scc the SC_C byte of the Negotiate
// (SCCNone: this package does no secure channel concatenation). The result
// is h.Size() bytes.
func HostResponse(h HashID, key, challenge []byte, seqNum uint32, tid uint16, scc uint8, hostNQN, subsysNQN string) []byte {
	return response(h, key, challenge, seqNum, tid, scc, "HostHost", hostNQN, subsysNQN)
}

// ControllerResponse computes the controller's response R2 to the host's
// challenge C2 (bidirectional authentication), as Linux's
// nvme_auth_dhchap_setup_ctrl_response and nvmet_auth_ctrl_hash:
//
//	R2 = HMAC-h(key, Ca || le32(seqNum) || le16(tid) || 0x00 || "Controller" ||
//	            subsysNQN || 0x00 || hostNQN)
//
// key is the controller secret's TransformedKey(subsysNQN); challenge is C2
// or its AugmentedChallenge; seqNum is S2 from the Reply. Note the NQN order
// and that the byte after tid is always 0 here.
func ControllerResponse(h HashID, key, challenge []byte, seqNum uint32, tid uint16, hostNQN, subsysNQN string) []byte {
	return response(h, key, challenge, seqNum, tid, 0, "Controller", subsysNQN, hostNQN)
}

func response(h HashID, key, challenge []byte, seqNum uint32, tid uint16, scc uint8, label, nqn1, nqn2 string) []byte {
	m := hmac.New(h.New, key)
	m.Write(challenge)
	var b [7]byte
	binary.LittleEndian.PutUint32(b[0:], seqNum)
	binary.LittleEndian.PutUint16(b[4:], tid)
	b[6] = scc
	m.Write(b[:])
	io.WriteString(m, label)
	io.WriteString(m, nqn1)
	m.Write([]byte{0})
	io.WriteString(m, nqn2)
	return m.Sum(nil)
}

// responseChallenge returns c itself for the null group (sessionKey nil)
// or its augmented form.
func responseChallenge(h HashID, sessionKey, c []byte) []byte {
	if sessionKey == nil {
		return c
	}
	return AugmentedChallenge(h, sessionKey, c)
}
