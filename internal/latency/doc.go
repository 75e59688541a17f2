// Package latency records durations in a fixed log-linear histogram (16
// sub-buckets per power of two, so percentiles are within about 6%) that
// never allocates after creation. A Histogram is not safe for concurrent
// use; merge per-goroutine histograms with Add.
package latency
