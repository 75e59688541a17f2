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
//
// Provider.Stats returns counters for a metrics exporter: connections,
// failed setups by reason, FPDUs and payload bytes each way, tagged bytes
// placed, Terminates by reason, CRC errors and TCP retransmissions. The
// data path counts per QP without locks or allocation (the transmitter once
// per vectored write, the receiver before each read from the socket); Stats
// sums the live QPs and adds a running total of the closed ones. The
// provider's logger gets each connection established and closed at Debug
// and each Terminate sent or received at Warn, never a line per FPDU.
package iwarp
