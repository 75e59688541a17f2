package iwarp

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// tcpRetrans returns tcpi_total_retrans of the TCP socket behind rc.
func tcpRetrans(rc syscall.RawConn) (uint64, bool) {
	var (
		info *unix.TCPInfo
		err  error
	)
	if cerr := rc.Control(func(fd uintptr) {
		info, err = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	}); cerr != nil || err != nil {
		return 0, false
	}
	return uint64(info.Total_retrans), true
}
