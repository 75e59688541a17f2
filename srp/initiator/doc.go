// Package initiator is rdisk's SRP initiator library: a Session logs in to
// an SRP target port over any rdma.Provider, and its logical units are
// blockdev.Devices.
//
//	s, _ := initiator.Login(ctx, provider, "10.0.0.1:5555", srp.MakePortID(idExt, iocGUID), initiator.Config{Channels: 2})
//	luns, _ := s.ReportLUNs(ctx)
//	dev, _ := s.Device(ctx, luns[0]) // blockdev.Device
//	// or: dev, _ := initiator.Open(ctx, provider, url, cfg); infos, _ := initiator.Discover(ctx, provider, url, cfg)
//
// A Session logs in Channels channels (the first with MULTI-CHANNEL ACTION
// 0, the others 1, as ib_srp's ch_count), asks for immediate data, and
// keeps at most the target's credits minus one (kept for task management)
// commands in flight per channel: Submit blocks until a slot and a credit
// are free. Writes that fit go as immediate data, others name the buffer
// through a per-I/O fast-registration key (direct descriptor; Policy
// forces indirect tables, in or out of the IU, for tests). It answers
// SRP_CRED_REQ and SRP_AER_REQ, treats SRP_T_LOGOUT as the end of the
// channel (LogoutError), retries I/O after unit attentions, BUSY and TASK
// SET FULL (scsi/host's policy), and logs out with SRP_I_LOGOUT on Close.
//
// A Device follows its LU's capacity (scsi/host's Live): a command that
// reports CAPACITY DATA HAS CHANGED is sent again only after READ
// CAPACITY(16) was read again, from another goroutine than the channel's
// (which never waits for a command), and checked and built against the new
// size; an SRP_AER_REQ reporting the change makes the Devices of its LUN
// re-read it too. Info and LU then give the new size; Device.Refresh
// re-reads it on demand. REPORTED LUNS DATA HAS CHANGED is logged and the
// command sent again.
//
// A Device is a blockdev.PathReporter and blockdev.Identifier (scsi/host's
// Path): DiskID is the LU's NAA designator from VPD page 83h; AccessState
// the ALUA state of the path's target port group from REPORT TARGET PORT
// GROUPS, read again after ASYMMETRIC ACCESS STATE CHANGED (a unit
// attention or an SRP_AER_REQ) and after a command refused for it, which
// completes with a *blockdev.PathError (blockdev.ErrPath).
//
// Session and Device methods are safe for concurrent use; completion
// callbacks run on the channel's goroutine (or, for a request sent again
// after a capacity change, on the goroutine that re-read it).
package initiator
