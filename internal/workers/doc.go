// Package workers is a bounded set of goroutines for requests that may
// block: disk I/O on devices that wait (backstore.WaitsAlways, flushes and
// uncached reads of buffered files). A queue hands such requests to its
// pool and keeps serving others, so it keeps several device I/Os in flight
// without a goroutine per request. The NVMe-oF controller core and the SCSI
// transports (SRP, iSER and iSCSI/TCP) each keep one pool per queue or
// connection.
package workers
