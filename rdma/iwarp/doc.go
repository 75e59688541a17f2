// Package iwarp is a pure-Go RDMA provider speaking standard iWARP over TCP:
// MPA (RFC 5044, with the RFC 6581 enhanced connection setup), DDP
// (RFC 5041) and RDMAP (RFC 5040), byte for byte as Linux's soft-iWARP
// driver siw does, so rdisk interoperates with the kernel's NVMe-oF, iSER
// and SRP code over siw.
//
// Each connected QP has one receiving goroutine, which reads FPDU headers
// through a small buffer and places payload straight from the socket into
// the registered memory after checking the STag's key, bounds and rights,
// and one transmitting goroutine, which writes FPDUs from registered
// memory with vectored writes. Protocol violations send a Terminate
// message with the RFC's layer, type and code, move the QP to the error
// state and flush its outstanding work requests.
package iwarp
