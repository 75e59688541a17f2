//go:build verbs

package verbs

import "github.com/rdisk/rdisk/rdma"

// Vendor IDs (ibv_device_attr.vendor_id) of the kernel's software devices.
const (
	rxeVendor = 0xffffff // RXE_VENDOR_ID, drivers/infiniband/sw/rxe/rxe_param.h
	siwVendor = 0x626d74 // SIW_VENDOR_ID ("bmt"), drivers/infiniband/sw/siw/siw.h
)

// deviceCaps is where a device departs from the rdma package's default
// behaviour; each entry names the code it comes from (Linux 6.1,
// rdma-core 44, as the lab runs them).
func deviceCaps(iwarp bool, vendor uint32) rdma.Caps {
	// libibverbs' struct ibv_wc has no solicited-event flag (nor does the
	// kernel's ib_wc): a Send's solicited bit only wakes
	// ibv_req_notify_cq(cq, 1) waiters.
	c := rdma.Caps{NoSolicitedFlag: true}
	if !iwarp {
		// The InfiniBand CM (RoCE too): REQ 92 bytes of private data, of
		// which rdma_cm's TCP port space header takes 36 (cma.c
		// cma_user_data_offset), REP 196, REJ 148 (ib_cm.h
		// IB_CM_*_PRIVATE_DATA_SIZE); ib_send_cm_req/rep/rej return
		// EINVAL past them.
		c.MaxConnectPrivateData, c.MaxAcceptPrivateData, c.MaxRejectPrivateData = 56, 196, 148
		// Fast registration is emulated with an ordinary user MR per Map
		// (libibverbs has no IB_WR_REG_MR); a Send with Invalidate of a
		// user MR is an error by the IBTA rules (rxe: rxe_invalidate_mr
		// "mr->type (3) is wrong type", the receive completes with
		// IB_WC_REM_INV_REQ_ERR and the QP goes to the error state).
		c.NoRemoteInvalidate = true
	}
	switch vendor {
	case rxeVendor:
		// rxe_mr.c copy_data returns -EINVAL, not -ENOSPC, when the
		// payload is longer than the receive's whole length (length >
		// resid), so send_data_in in rxe_resp.c takes it for a malformed
		// WQE: IB_WC_LOC_QP_OP_ERR (and a NAK "remote operation error").
		c.RecvOverrunStatus = rdma.StatusLocalQPErr
	case siwVendor:
		// siw_send_mpareqrep (siw_cm.c) keeps the private data length
		// in a u8 and adds the 4 bytes of MPA v2 IRD/ORD to it: 252 bytes
		// wrap to 0 in the MPA header, and the peer reads garbage. 251
		// is the most that goes through, for requests, replies and
		// rejects alike.
		c.MaxConnectPrivateData, c.MaxAcceptPrivateData, c.MaxRejectPrivateData = 251, 251, 251
		// libsiw's copy_cqe (providers/siw/siw.c) sets wc_flags to 0:
		// SIW_WQE_REM_INVAL and the CQE's inval_stag never reach the
		// caller, though siw_proc_send invalidated the key.
		c.NoInvalidateReport = true
		// A Read whose source siw refuses (siw_qp_sq_proc_tx, READ
		// RESPONSE: siw_check_sgl_tx fails) is answered with a TERMINATE
		// (RDMAP, remote protection); the requester's siw_proc_terminate
		// returns -ECONNRESET and siw_sq_flush completes the ORQ's Read
		// with IB_WC_WR_FLUSH_ERR.
		c.RemoteErrorFlushes = true
		// siw_qp_sq_proc_tx checks a READ RESPONSE's source with
		// siw_check_sgl_tx(qp->pd, wqe, 0): no permission bits, so
		// memory without IB_ACCESS_REMOTE_READ is read all the same.
		c.RemoteReadUnchecked = true
		// Unsignaled WQEs of a page or more would be sent zero-copy:
		// PostSend signals them itself (siwZeroCopyMin), no departure.
	}
	return c
}

// Caps implements rdma.Capable: the device's departures from the rdma
// package's default behaviour (see deviceCaps).
func (p *Provider) Caps() rdma.Caps { return p.dev.caps }

// pdLimit is the private data limit of one CM message kind.
func (p *Provider) pdLimit(kind int) int {
	c := rdma.CapsOf(p)
	switch kind {
	case pdConnect:
		return c.MaxConnectPrivateData
	case pdAccept:
		return c.MaxAcceptPrivateData
	}
	return c.MaxRejectPrivateData
}

const (
	pdConnect = iota
	pdAccept
	pdReject
)
