// Package target is rdisk's iSCSI target portal: one listener that serves
// iSCSI over TCP (RFC 7143) and iSER (RFC 7145) on rdisk's RDMA API, told
// apart by the first bytes of each connection, with SCSI commands executed
// by package scsi.
//
// # Use
//
//	disk, _ := backstore.NewMem(1<<30, 512)
//	t, err := target.New(target.Config{
//		Targets: []target.TargetConfig{{
//			Name: "iqn.2026-11.io.rdisk:default",
//			LUNs: []target.LUNConfig{{LUN: 0, Disk: disk}},
//			// AllowedInitiators, ACLs, CHAP, MutualCHAP: optional
//		}},
//		Provider: iwarpProvider, // nil: iSCSI/TCP only
//	})
//	ln, _ := net.Listen("tcp", "127.0.0.1:3260")
//	go t.Serve(ctx, ln) // or t.ListenAndServe(ctx, "127.0.0.1:3260")
//	...
//	t.Drain(ctx) // optional: sessions finish their commands and log out
//	t.Close()    // announces the drop (Async Message), ends every session
//
// # Portal
//
// A connection whose first 16 bytes are the MPA request key ("MPA ID Req
// Frame") goes to Config.Provider.ServeConn, and the RDMA connection request
// it yields becomes an iSER connection; anything else is iSCSI over TCP
// (its first bytes are a Login Request BHS). Logins use package iser's
// engines: AuthMethod None or CHAP (one-way and mutual), per target and for
// discovery sessions; access by initiator name (AllowedInitiators and
// ACLs: LoginForbidden) and unknown targets (LoginNotFound) are decided in
// Resolve.
//
// # Per-initiator LUN maps
//
// TargetConfig.ACLs are LIO-style node ACLs: an entry admits its initiator
// and, with MappedLUNs, gives it a LUN map of its own (mapped LUN -> the
// target's LUN, optionally read-only, as LIO's mapped_lunN with
// write_protect). Its sessions see only those LUNs under the mapped
// numbers (a scsi.LUNView); initiators without mapped LUNs see every LUN. SendTargets answers list
// the targets the initiator may log in to, at the address it reached.
//
// # Full feature phase
//
// Each connection has a fixed set of task slots (the command window,
// Config.QueueDepth, plus a few for immediate commands), each with its
// scsi.Command, data buffer (grown on first use up to Config.MaxTransfer,
// then reused; registered memory on iSER), sense and response bytes: the
// steady state allocates nothing per command. Commands are delivered in
// CmdSN order (ahead-of-window commands are held, duplicates and
// out-of-window ones ignored, as RFC 7143 section 4.2.2.1 says); MaxCmdSN
// advances as slots free. Commands on disks that never block (RAM, null)
// run on the connection's receive loop; READ, WRITE and SYNCHRONIZE CACHE
// on a backstore.AsyncDisk are started there (scsi.Session.Start) and
// answered from the disk's completion; others run on Config.Workers worker
// goroutines per connection (COMPARE AND WRITE and its kind always do:
// they may wait for zero-copy reads). Over iSER, reads of a RAM disk go
// from the disk's memory straight into the data-in RDMA Write through the
// implicit MR (scsi.Command.Views), held until the response's send
// completes.
//
// iSCSI/TCP: immediate data, unsolicited Data-Out (InitialR2T=No up to
// FirstBurstLength) and R2Ts of at most MaxBurstLength (one outstanding)
// collect the data-out; Data-In PDUs of at most the initiator's
// MaxRecvDataSegmentLength carry data-in, the last one with the status when
// there is no sense data. A Data-Out with a wrong DataSN or offset fails its
// command with ABORTED COMMAND / DATA PHASE ERROR and keeps the connection.
// A sender goroutine batches responses of other goroutines into one write;
// the receive loop writes its own responses and flushes when its input is
// drained.
//
// iSER: the CM private data is answered as Linux isert does (ZBVA never
// used; Send with Invalidate unless the initiator refused it, sent no
// private data at all, or Config.NoSendWithInvalidate). Data-in goes by RDMA Write to the read
// STag/VA, data-out after the immediate data is pulled by one RDMA Read from
// the write STag/VA (InitialR2T=Yes: no Data-Out PDUs), and the SCSI
// Response follows as a Send (with Invalidate of the command's STag). The
// RDMA Read depth (ORD) is half the initiator's IRD, at most 16: rdisk's
// iWARP provider frees an IRD slot only after the writev of a Read
// Response returns, so a requester running at exactly IRD can be
// terminated for exceeding it.
//
// Task management maps to scsi.Session.TaskManagement (ABORT TASK, ABORT
// TASK SET, CLEAR TASK SET, LOGICAL UNIT RESET, TARGET WARM/COLD RESET);
// commands not yet in Execute (held, waiting for data, queued) are dropped
// here, aborted commands get no response, and the TMF response follows the
// responses already queued. ABORT TASK of a completed task answers "task
// does not exist". NOP-Out pings are answered, Text requests go to
// iser.TextResponder, Logout closes the connection after its response,
// SNACKs are rejected (ErrorRecoveryLevel 0), a login with the ISID of a
// live session reinstates it.
//
// # Errors and stalled peers
//
// Immediate data is checked as LIO's iscsit_setup_scsi_cmd checks it: more
// than FirstBurstLength is rejected with reason Invalid PDU field (LIO's
// ISCSI_REASON_BOOKMARK_INVALID); more than the Expected Data Transfer
// Length, immediate data with ImmediateData=No, or all of the data
// immediate with the F bit clear are rejected as protocol errors. The
// connection stays and the command's CmdSN is not consumed (RFC 7143
// section 11.17.1: the initiator plugs the gap). Unsolicited Data-Out
// beyond FirstBurstLength fails its command with CHECK CONDITION, ABORTED
// COMMAND, 0x0c0d, as LIO's iscsit_check_unsolicited_dataout. Errors that
// end the connection at ErrorRecoveryLevel 0 with the PDU's header intact
// (a data segment longer than MaxRecvDataSegmentLength, Data-Out beyond
// the expected length or the R2T, a malformed PDU on iSER) are answered
// with a Reject carrying that header first; the connection closes once it
// is sent (at most a second later). Header digest errors and garbage
// without a header close at once.
//
// A connection in full feature phase that receives nothing for
// Config.NopInInterval (default 15 s, LIO's nopin_timeout) is pinged with
// a NOP-In (ITT 0xffffffff, a TTT of the target's, StatSN not advanced);
// if the NOP-Out echoing that TTT does not come within Config.NopInTimeout
// (default 30 s, LIO's nopin_response_timeout) the connection is dropped
// and its tasks end as on any connection loss (session end reason
// "timeout"). On iSCSI/TCP a PDU must arrive whole within
// Config.PDUTimeout (default 30 s) once its first byte did: a header or
// data segment that stops midway drops the connection, and a write waiting
// for its next Data-Out PDU (unsolicited, or for its R2T) drops it after
// Config.DataOutTimeout (default 10 s; LIO's dataout timer, 3 s, does the
// same at ErrorRecoveryLevel 0). The login phase,
// a partial Login Request included, is bounded by Config.LoginTimeout.
//
// # Management
//
// A serving Target can be inspected and changed: Sessions lists the
// sessions with their connections and counters (commands completed, data
// moved); CloseSession asks an initiator to log out (Async Message
// "target requests logout") and drops its connection after two seconds if
// it has not; AddTarget and RemoveTarget add and remove target nodes (the
// sessions of a removed one end as CloseSession ends them); MapLUN and
// UnmapLUN change a LUN map through scsi.Target.Map and Unmap (REPORTED
// LUNS DATA HAS CHANGED unit attentions; UnmapLUN also drops the mapped
// LUNs reaching the LUN from the ACLs); SetAllowedInitiators and SetCHAP
// change the access control of new logins; SetACLs changes the ACL entries
// of new logins and the LUN maps of running sessions (their views swap,
// with a REPORTED LUNS DATA HAS CHANGED unit attention).
//
// # ALUA
//
// The portal group's target port has relative target port identifier
// Config.RelativeTargetPort (default the TPGT, as LIO's lun_rtpi follows
// the TPG); every session of the portal comes in through it. A target's
// TargetConfig.PortGroups are its ALUA target port groups
// (scsi.PortGroupConfig): several rdisk gateways exporting one disk list
// all the gateways' ports, each with its state, and SetPortGroupState
// changes a group's state live (sessions get ASYMMETRIC ACCESS STATE
// CHANGED with their next command; iSCSI has no asynchronous event Linux
// acts on for it). PortGroups reports the groups.
//
// # Metrics, logs and drain
//
// Stats returns counters for a metrics collector (connections by
// transport, logins, logins refused and sessions ended by reason, from
// fixed documented sets, and the sessions live); they move once per
// connection, login or session, never per command. The logger gets a
// connection accepted (debug), each session opened and ended (info, with
// the keys target, initiator, isid, tsih, transport, peer, reason) and
// each refused login (warning, with the peer, the initiator and the
// reason).
//
// Drain takes the portal out of service: listeners close, logins are
// refused with 03/01 "service unavailable", command windows stop
// opening, and each session whose commands in flight have completed is
// asked to log out (Async Message "target requests logout"); what is left
// when its context ends is dropped and named in its error.
//
// # Concurrency
//
// Target methods are safe for concurrent use. The package has no
// package-level mutable state.
package target
