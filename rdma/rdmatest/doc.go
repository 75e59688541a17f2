// Package rdmatest is the conformance suite of the rdma API: every provider
// runs Run from its tests and passes all of it.
package rdmatest
