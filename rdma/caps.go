package rdma

// Caps tells where a provider departs from the behaviour this package
// describes, which rdma/iwarp has in full. The departures come from the
// device, its kernel driver or its user-space library, not from choice:
// each one is documented with the code it comes from. The zero value is
// the full behaviour; a provider that departs from it implements Capable.
// Protocols read it through CapsOf (for example to keep their connection
// private data within the limits, or not to ask a peer to invalidate a key
// the provider cannot have invalidated), and the conformance suite
// (rdma/rdmatest) checks each declared departure exactly, in place of the
// default behaviour.
type Caps struct {
	// MaxConnectPrivateData, MaxAcceptPrivateData and MaxRejectPrivateData
	// are the largest private data Connect, Accept and Reject carry; 0
	// means MaxPrivateData. The InfiniBand CM (also over RoCE) carries 56
	// bytes in a connect request through rdma_cm (92 less its 36-byte
	// header), 196 in a reply and 148 in a reject.
	MaxConnectPrivateData, MaxAcceptPrivateData, MaxRejectPrivateData int

	// NoSolicitedFlag: receive completions never carry WCSolicited (the
	// Send's solicited bit still goes on the wire). libibverbs' ibv_wc has
	// no such flag.
	NoSolicitedFlag bool

	// RecvOverrunStatus, when not StatusSuccess, is the status a receive
	// completes with when the Send is longer than its buffer, in place of
	// StatusLocalLength (Linux rxe in 6.1 reports StatusLocalQPErr). The
	// connection ends either way.
	RecvOverrunStatus Status

	// NoRemoteInvalidate: a peer's Send with Invalidate naming one of this
	// provider's fast-registration keys fails: the receive completes with
	// StatusRemoteInvReq and the connection ends. A protocol must not ask
	// the peer to invalidate (it invalidates locally after the response).
	NoRemoteInvalidate bool

	// NoInvalidateReport: a Send with Invalidate does invalidate the key,
	// but its receive completion does not say so (no WCWithInv, no
	// InvalidatedKey), so the FastRegMR still reads as valid: the receiver
	// calls Invalidate itself once the response came.
	NoInvalidateReport bool

	// RemoteErrorFlushes: an RDMA Read the peer refuses (unknown or stale
	// key, out of bounds) ends the connection with the Read completing as
	// StatusFlushed, not StatusRemoteAccess.
	RemoteErrorFlushes bool

	// RemoteReadUnchecked: this provider answers RDMA Reads of memory
	// registered without AccessRemoteRead (its key and bounds are still
	// checked). Memory a peer may not read must not be registered with a
	// remote key at all on such a provider.
	RemoteReadUnchecked bool
}

// Capable is implemented by providers that depart from the default
// behaviour (see Caps).
type Capable interface {
	Caps() Caps
}

// CapsOf returns p's Caps, the zero value when p does not implement
// Capable. Its private-data limits are filled in (never 0).
func CapsOf(p Provider) Caps {
	var c Caps
	if cp, ok := p.(Capable); ok {
		c = cp.Caps()
	}
	for _, v := range []*int{&c.MaxConnectPrivateData, &c.MaxAcceptPrivateData, &c.MaxRejectPrivateData} {
		if *v <= 0 || *v > MaxPrivateData {
			*v = MaxPrivateData
		}
	}
	return c
}
