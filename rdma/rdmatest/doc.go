// Package rdmatest is the conformance suite of the rdma API: every provider
// runs Run from its tests and passes all of it.
//
// The suite expects the behaviour the rdma package describes, which the
// pure-Go iWARP provider has in full. A provider whose device departs from
// it declares each departure (rdma.Caps, through rdma.Capable), and the
// suite then checks the declared behaviour exactly instead: a limit is
// tested at the limit and one past it, an error reported differently must
// be reported that way, an absent feature must be absent. Nothing is
// skipped for a provider that declares nothing.
package rdmatest
