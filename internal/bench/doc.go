// Package bench is rdisk's fio-like load generator over a blockdev.Device:
// sequential or random reads, writes or a mix at a block size, a queue depth
// per job and a number of jobs, for a duration; with --verify, written
// blocks carry their own address and the run's seed and every read is
// checked, then everything written is read back. It reports IOPS,
// bandwidth, latency percentiles and errors, live and at the end.
//
// Each job owns a contiguous slice of the region and submits to its own
// queue (job modulo the device's queues), keeping QD requests in flight; its
// completions come back on a channel to the job's goroutine. Nothing
// allocates per I/O.
//
// # Concurrency
//
// Run may be called concurrently on different devices (or the same one: the
// jobs then share its queues). Options.Progress is written from one
// goroutine of the run.
package bench
