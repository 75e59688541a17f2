// Package auth implements NVMe in-band authentication with DH-HMAC-CHAP
// (NVMe Base Specification 2.0 section 8.13, TP 8006) for both ends of a
// Fabrics queue, byte for byte as Linux does it (drivers/nvme/common/auth.c,
// drivers/nvme/host/auth.c, drivers/nvme/target/auth.c and
// fabrics-cmd-auth.c, the nvmf_auth_* structures of include/linux/nvme.h)
// and with secrets in the DHHC-1 form of nvme-cli and libnvme.
//
// It is transport independent and does no I/O: the messages are the data
// of the Fabrics Authentication Send and Authentication Receive commands
// (SECP 0xE9, SPSP0 1, SPSP1 1), which the caller moves.
//
// # Layers
//
//   - Secrets: ParseSecret, Secret.String, NewSecret, GenerateSecret,
//     ReadSecretFile, and Secret.TransformedKey (nvme_auth_transform_key).
//   - Primitives: the hash functions (HashID), the RFC 7919 groups
//     (DHGroupID, DHKey), AugmentedChallenge, HostResponse and
//     ControllerResponse.
//   - Codecs: Negotiate, Challenge, Reply, Success1, Success2 and Failure
//     with AppendBinary and Parse functions; ParseMessage dispatches on
//     auth_type/auth_id. Parsers check lengths before slicing, accept
//     trailing bytes (a Receive buffer is zero-padded to its allocation
//     length) and never panic; parse errors wrap ErrMalformed.
//   - Exchanges: Host and Controller, state machines (HostState,
//     ControllerState) that take the received message's bytes and return
//     the bytes to send.
//
// # An exchange
//
//	host                                    controller
//	Start(tid)        --AUTH_Negotiate-->   Send        (hash, group chosen)
//	HandleChallenge   <--Challenge-------   Receive     (C1, S1, g^x)
//	                  --Reply----------->   Send        (R1 checked)
//	HandleSuccess1    <--Success1--------   Receive     (R2 if asked)
//	                  --Success2-------->   Send        (bidirectional only)
//
// Either side may end it: the controller with AUTH_Failure1 (returned by
// its next Receive), the host with AUTH_Failure2. The reason is a
// FailureCode, which the returned *Error carries and errors.Is matches.
//
// # Buffers and concurrency
//
// Messages returned by Host and Controller methods are new slices owned by
// the caller; message arguments are read during the call and not retained.
// Parse functions return structures whose byte slices alias the input.
// Host and Controller are not safe for concurrent use (one exchange per
// queue, driven in order); SeqCounter and DHKey are. The package has no
// mutable package-level state.
//
// # Wiring it into a transport (as Linux does)
//
// Target: when the host has a secret configured, Connect (admin and every
// I/O queue) answers with ATR set in the result (nvmeof.ConnectAuthReqATR,
// NVME_CONNECT_AUTHREQ_ATR) and a NewController for that queue; until
// Controller.Authenticated, other commands fail with Authentication Required
// (NVME_SC_AUTH_REQUIRED, DNR). Authentication Send/Receive with SECP not
// SECP, SPSP0/SPSP1 not 1, or TL/AL 0 fail with Invalid Field (DNR) before
// this package is called; otherwise Send gets the TL bytes and Receive(AL)
// produces the data, and both commands complete successfully (an
// ErrShortBuffer from Receive: Invalid Field). In CtrlFailed tear the
// controller down (nvmet_ctrl_fatal_error); after KATO (or 120 s) without
// progress call Reset.
//
// Host: when Connect's result has ATR set, run Start, HandleChallenge and
// HandleSuccess1 on that queue, sending with Authentication Send and
// reading with Authentication Receive (AL 4096, MaxMessageSize), before
// any other command; with no secret configured, fail the connect (Linux:
// "authentication required"). Take the transaction ID from a
// per-controller counter.
//
// # What is not implemented
//
// Secure channel concatenation (SC_C other than 0, TLS PSK generation):
// a controller answers it with FailureConcatMismatch as nvmet built without
// TLS does.
package auth
