// Package blockio holds synchronous helpers for frontends that serve one
// request per goroutine (FUSE, rdisk cp, the NBD server's slow path): a pool
// of registered chunk buffers, each with its own reusable Request, and byte-
// granular ReadAt/WriteAt that do read-modify-write of partial blocks.
package blockio
