// Package sysmon spaces out the wake-ups of the Go runtime's system
// monitor thread (sysmon) by raising that one thread's timer slack.
//
// Why: sysmon sleeps 20 µs at a time (usleep) for as long as it keeps
// finding a P in a system call or cgo call that it can hand to another
// thread (runtime.retake), and only backs off after 50 rounds without one.
// An I/O server makes system calls (socket writes that, over loopback,
// carry the receiver's whole TCP receive path) and cgo calls (librbd) all
// the time, so sysmon wakes about every 70 µs (20 µs plus the default
// 50 µs slack) and, with one P per busy queue, takes the P away from each
// call that lasts past a round: the thread that made the call then finds
// its P gone on return and sleeps, another thread is woken to run the
// queue. On this project's 2-core test VM that cost 11% of an RBD
// gateway's CPU in sysmon alone plus the hand-offs; with a 1 ms slack on
// sysmon, 4 KiB NVMe-oF/RDMA reads at QD32 from a RAM disk went up 13-14%,
// writes 9-10%, and RBD gateway 4 KiB writes and 128 KiB reads 5-8%.
//
// The slack only lets the kernel fire sysmon's timer later (up to the
// slack), so a P blocked in a long system call is handed on after about
// the slack instead of 20-70 µs; sysmon's other duties (preempting a
// goroutine after 10 ms, forced GC, polling the network after 10 ms) are
// not delayed noticeably. Threads the runtime starts from sysmon (rare: a
// hand-off when no idle thread exists) inherit the slack, which only makes
// their own timed sleeps up to that much later.
//
// Finding the thread: the runtime does not name it, so SetSlack looks for
// the one thread of the process, other than the caller's, that sits in
// nanosleep(2) (sysmon's usleep; the runtime's other threads park in
// futex(2) or epoll), sampling /proc/self/task for a few milliseconds
// while the caller stays busy (so that sysmon does not park itself).
// Setting another thread's slack needs CAP_SYS_NICE
// (/proc/TID/timerslack_ns).
package sysmon
