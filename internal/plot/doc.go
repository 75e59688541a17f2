// Package plot draws a benchmark run for people to look at: IOPS and
// bandwidth over time, and the completion latency distribution, in one SVG
// or PNG. A Recorder collects the data by wrapping the blockdev.Device a
// benchmark drives, so the benchmark itself needs no change.
package plot
