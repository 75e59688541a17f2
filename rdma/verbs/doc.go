// Package verbs is an rdma.Provider over rdma-core's libibverbs and
// librdmacm (kernel RDMA devices: rxe, siw, mlx5, irdma, ...).
//
// The provider needs cgo and is built only with the build tag "verbs"
// (go build -tags verbs); without it this package is empty, so the default
// build stays pure Go and links statically. It links against libibverbs and
// librdmacm (Debian: libibverbs-dev, librdmacm-dev).
//
// Memory: PD.RegisterMemory takes the caller's []byte. Go's garbage
// collector does not move heap objects, and the MR pins the buffer's
// object (runtime.Pinner) and keeps a reference to it until Deregister, so
// a buffer from make or backstore.AlignedBuffer (which is Go heap memory)
// may be registered; the caller must not let the adapter access the memory
// after Deregister. Buffers on a goroutine stack must not be registered
// (they can move), which is why the buffer is pinned: the runtime refuses
// to pin what it cannot keep in place.
//
// Devices depart from the rdma package's default behaviour in places (the
// InfiniBand CM's private data limits, rxe's and siw's error reporting,
// libsiw's completion flags, no remote invalidation of the emulated
// fast-registration keys over RoCE): Provider.Caps declares them, from
// deviceCaps in caps.go, which names the kernel and rdma-core code each one
// comes from. Fast registration is emulated by an ibv_reg_mr per Map
// (libibverbs has no IB_WR_REG_MR); memory windows of type 2, which rxe
// supports, are bound to one QP, which FastRegMR does not know.
package verbs
