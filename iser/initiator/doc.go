// Package initiator is rdisk's iSCSI initiator for both transports:
// iSCSI over TCP (RFC 7143) and iSER (RFC 7145) over any rdma.Provider (the
// pure-Go iWARP provider interoperates with Linux isert over siw). It logs
// in with AuthMethod None or CHAP (one-way or mutual), runs discovery
// (SendTargets), keeps up to the command window's worth of commands in
// flight, sends task management functions, and exposes a LUN as a
// blockdev.Device.
//
// # Use
//
//	recs, err := initiator.Discover(ctx, iser.TransportTCP, "10.0.0.1:3260", cfg)
//	u, _ := initiator.ParseURL("iser://10.0.0.1:3260/iqn.2026-11.io.rdisk:default/0")
//	d, err := initiator.Open(ctx, u, cfg) // a blockdev.Device; Close logs out
//
//	s, err := initiator.Login(ctx, iser.TransportTCP, addr, iqn, cfg)
//	err = s.Execute(ctx, &initiator.Command{CDB: cdb, DataIn: buf}) // any SCSI command
//	r, err := s.TaskManagement(ctx, iser.TMFLogicalUnitReset, lun, 0)
//	err = s.Logout(ctx)
//
// # I/O
//
// A session has QueueDepth task slots (capped by the target's initial
// command window) plus a few for task management, NOP, Text and Logout. A
// slot's ITT is its index and a generation. Commands take CmdSNs in the
// order they go out and wait while the window is closed.
//
// iSCSI/TCP: a sender goroutine writes commands with immediate data (up to
// FirstBurstLength and the target's MaxRecvDataSegmentLength), unsolicited
// Data-Out when InitialR2T=No, and Data-Out answering R2Ts, one flush per
// batch; the receive goroutine places Data-In in the request's buffer and
// completes commands on their status.
//
// iSER: each slot has its Send buffer and a fast-registration key. A read
// exposes the request's buffer under the key (read STag/VA); a write sends
// its first FirstBurstLength bytes as immediate data straight from the
// buffer (second scatter entry) and exposes the rest (write STag, VA after
// the immediate data) for the target's RDMA Read. The key is invalidated by
// the target's Send with Invalidate, checked against the slot, or locally.
// One goroutine polls the CQ; submitters post Sends directly.
//
// Device issues READ(16), WRITE(16) (FUA), SYNCHRONIZE CACHE(16), UNMAP
// and WRITE SAME(16) of a zero block; it reads READ CAPACITY(16) and the
// block limits and provisioning VPD pages at open, clears the unit
// attentions of the new nexus, and resends a command that reports a unit
// attention, BUSY or TASK SET FULL (up to host.MaxRetries times, the
// policy of package scsi/host). Nothing on the I/O path allocates.
//
// A Device follows its LU's capacity (scsi/host's Live): a command that
// reports CAPACITY DATA HAS CHANGED gives its slot back, READ CAPACITY(16)
// is read again on another goroutine, and the command is submitted again,
// checked and built against the new size; Info and LU then give the new
// size (Device.Refresh re-reads it on demand: iSCSI has no event for it).
// REPORTED LUNS DATA HAS CHANGED is logged and the command sent again.
//
// A Device is a blockdev.PathReporter and blockdev.Identifier (scsi/host's
// Path): DiskID is the LU's NAA designator from VPD page 83h; AccessState
// the ALUA state of the path's target port group from REPORT TARGET PORT
// GROUPS, read again after ASYMMETRIC ACCESS STATE CHANGED and after a
// command refused for it, which completes with a *blockdev.PathError
// (blockdev.ErrPath) so a multipath layer goes on through another path.
//
// Any transport error or protocol violation, and a command without a
// response for Config.CommandTimeout, fails the whole session (there is no
// reconnect): requests in flight complete with an error matching
// blockdev.ErrClosed. A SCSI status other than GOOD is a *StatusError that
// matches the blockdev sentinel of its sense.
//
// # Concurrency
//
// Session and Device methods are safe for concurrent use.
package initiator
