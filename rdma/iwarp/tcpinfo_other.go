//go:build !linux

package iwarp

import "syscall"

// tcpRetrans reports no retransmission count: TCP_INFO is Linux's.
func tcpRetrans(rc syscall.RawConn) (uint64, bool) { return 0, false }
