// Package rdma is rdisk's verbs API: providers (devices), protection domains,
// registered memory regions with remote keys, reliable-connected queue pairs,
// completion queues and a connection manager in the rdma_cm shape.
//
// Protocol packages (NVMe-oF, SRP, iSER) use only this API; providers
// implement it: rdma/iwarp in pure Go over TCP (wire-compatible with Linux
// siw), and a cgo provider over libibverbs for real adapters. The package
// rdma/rdmatest holds the conformance suite that every provider passes.
//
// Memory is registered once and reused. Remote access is checked against the
// key, the bounds and the access rights of the region; a violation ends the
// connection and never touches memory outside the region. Work requests are
// copied when posted, so callers reuse their WR structs and scatter lists and
// the steady-state data path allocates nothing.
package rdma
