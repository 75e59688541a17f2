// Package uring is a small pure-Go io_uring (no cgo): io_uring_setup,
// io_uring_enter and io_uring_register through raw system calls, the
// submission and completion rings and the SQE array mmap'd from the ring
// descriptor, and the SQE and CQE layouts of include/uapi/linux/io_uring.h.
//
// A Ring is not safe for concurrent use by itself: its owner (backstore's
// file and block disks) serializes the submission side with a lock of its
// own and reaps completions on one goroutine. The ring's head and tail
// words are shared with the kernel and accessed with atomic loads and
// stores, which on Go's memory model give the acquire/release ordering
// liburing's io_uring_smp_load_acquire / io_uring_smp_store_release give.
package uring
