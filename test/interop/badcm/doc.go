// Command badcm is a misbehaving RDMA peer for the lab's bad-input checks
// (test/interop/guest/verbs-badinput-rxe.sh): over the verbs provider
// (rdma-core, so over rxe or siw), it sends a connection request carrying
// the private data it is given, and, when the target accepts, a Send of
// the bytes it is given, then reports what the target did, one line each
// on stdout:
//
//	BADCM: REJECTED pd=HEX           the connection was rejected, with that private data
//	BADCM: ACCEPTED reply=HEX        the connection was accepted
//	BADCM: RECV len=N data=HEX       the target sent a message (the first 64 bytes)
//	BADCM: CLOSED err=...            the connection ended
//	BADCM: ERROR ...                 the connect failed otherwise
//
// It builds only with -tags verbs (cgo); without the tag it is a stub
// that says so.
//
//	badcm -addr HOST:PORT -pd HEX [-send HEX] [-wait 3s]
package main
