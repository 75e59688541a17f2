// Package rdmaperf measures an rdma provider in the style of perftest
// (ib_write_bw, ib_read_bw, ib_send_lat): a server exposes a registered
// buffer and a client keeps a queue depth of RDMA Writes, RDMA Reads or
// Sends against it for a duration, recording bandwidth, message rate and
// latency. It knows only the rdma API.
package rdmaperf
