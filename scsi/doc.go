// Package scsi is rdisk's transport-neutral SCSI target core: SPC-4 and
// SBC-3 semantics over a backstore.Disk, shared by the iSER, iSCSI/TCP and
// SRP targets. It parses and executes commands; it knows nothing of PDUs,
// information units or RDMA.
//
// # Shape
//
// A Target holds a LUN map of logical units (LU, made by NewLU from a
// backstore.Disk and an LUConfig identity). A transport opens a Session per
// I_T nexus (Target.NewSession, with the initiator port name, the relative
// target port and the protocol identifier), passes each command to
// Session.Execute and each task management request to
// Session.TaskManagement, and closes the session on logout or connection
// loss. On a backstore.AsyncDisk, Session.Start begins READ, WRITE and
// SYNCHRONIZE CACHE without waiting for the disk and completes them through
// Command.Done; a transport that can send from any memory sets
// Command.Views so that reads of a RAM disk answer from its memory without
// a copy (held until Command.Release; COMPARE AND WRITE, ORWRITE and WRITE
// ATOMIC wait for that, so a read never sends half of one). Commands to unmapped LUNs are answered as SPC-4 asks (INQUIRY with
// peripheral qualifier 011b, REPORT LUNS, LOGICAL UNIT NOT SUPPORTED).
//
// A session may see a LUN map of its own, a LUNView (SessionConfig.View,
// Session.SetView): LIO's mapped LUNs of a node ACL. The view maps the LUN
// numbers the session's initiator uses to the target's LUNs, each mapping
// optionally read-only (writes fail with DATA PROTECT / WRITE PROTECTED,
// MODE SENSE reports WP). REPORT LUNS lists the mapped LUNs; other LUN
// numbers are answered as unmapped LUNs. Reservations, unit attentions and
// task sets stay the logical unit's, whatever number each session sees it
// under. A view replaced while the session runs, or a target LUN it maps
// that is mapped or unmapped, gives the session a REPORTED LUNS DATA HAS
// CHANGED unit attention. Lookups through a view cost one binary search, as
// without one, and allocate nothing.
//
// Execute follows "parse, then execute": the opcode (and service action)
// selects a descriptor from the LU's command table (which also feeds REPORT
// SUPPORTED OPERATION CODES, so the two always agree), unit attentions and
// reservation conflicts are checked, fields are validated with the
// sense-key-specific field pointer of the offending bit, and only then does
// the command touch the disk. CDBs are read through byte-slice views; no
// CDB is copied.
//
// # Transport contract
//
// The transport owns every buffer: the CDB, the data-out bytes it has
// already received (or pulled with RDMA Read), the data-in buffer the core
// fills (registered memory it then sends), and the sense buffer. The core
// keeps no reference after Execute returns and allocates nothing per READ
// or WRITE (the allocation tests check this). Command documents the buffer
// rules, the residual rules (overflow and underflow per SAM-5 and RFC 7143,
// matching libiscsi's iSCSIResiduals tests) and the abort contract: an
// aborted command returns from Execute with Aborted set (send nothing) or
// with TASK ABORTED status (tasks of other nexuses; TAS is set).
// Session.DataOutLength tells an RDMA transport how much data-out a command
// will use before it pulls it.
//
// Execute blocks for the backstore I/O and may be called by many goroutines
// at once, for one session or many. Commands that need media data besides
// the transport's buffers (VERIFY, COMPARE AND WRITE, ORWRITE, WRITE SAME
// patterns, reads whose expected length ends inside a block) use a small
// per-LU pool of reusable scratch buffers.
//
// # Commands
//
// SPC: TEST UNIT READY, INQUIRY (standard data; VPD pages 00h, 80h, 83h
// with NAA, T10 vendor ID, EUI-64, relative target port, target port group
// and SCSI name designators, B0h, B1h, B2h), REQUEST SENSE, REPORT LUNS,
// MODE SENSE(6/10) and MODE SELECT(6/10) (caching, control, informational
// exceptions; current, changeable and default values), LOG SENSE (supported
// pages, temperature, informational exceptions), REPORT SUPPORTED
// OPERATION CODES (all, one command, with timeout descriptors), REPORT
// SUPPORTED TASK MANAGEMENT FUNCTIONS, REPORT TARGET PORT GROUPS (both
// parameter data formats), PERSISTENT
// RESERVE IN (READ KEYS, READ RESERVATION, REPORT CAPABILITIES, READ FULL
// STATUS) and OUT (REGISTER, REGISTER AND IGNORE EXISTING KEY, RESERVE,
// RELEASE, CLEAR, PREEMPT, PREEMPT AND ABORT; all six reservation types),
// RESERVE(6/10) and RELEASE(6/10), EXTENDED COPY (LID1) and RECEIVE COPY
// RESULTS (COPY STATUS, OPERATING PARAMETERS).
//
// SBC: READ CAPACITY(10/16), READ and WRITE(6/10/12/16) with FUA, WRITE AND
// VERIFY(10/12/16), VERIFY(10/12/16) with BYTCHK 00b/01b/11b, SYNCHRONIZE
// CACHE(10/16), WRITE SAME(10/16) with UNMAP and NDOB, UNMAP, GET LBA STATUS,
// COMPARE AND WRITE, ORWRITE(16), WRITE ATOMIC(16) (LUConfig.
// AtomicTransferBlocks), PRE-FETCH(10/16), READ DEFECT DATA(10/12) (empty
// lists), START STOP UNIT and PREVENT ALLOW MEDIUM REMOVAL. COMPARE AND
// WRITE, ORWRITE and WRITE ATOMIC are atomic against every other writer of
// their range (a range lock whose common case is two atomic operations per
// write). LUConfig.PhysicalBlockExp sets the physical block (READ
// CAPACITY(16) LBPPBE, the block limits granularities).
//
// # Third-party copy
//
// EXTENDED COPY (LID1) copies blocks between LUs of the session's target,
// as LIO's emulate_3pc and what VMware's XCOPY offload sends: block to block
// segment descriptors (02h) and identification CSCD descriptors (E4h) that
// name LUs by the NAA designator of their VPD page 83h, looked up among the
// LUs the session sees (its LUN view; a read-only mapping is never a
// destination). Parameter lists are checked whole, in LIO's order, before
// a block moves; a CSCD that names no LU, a range outside its LU, and I/O
// failures end the copy with COPY ABORTED, COPY TARGET DEVICE NOT
// REACHABLE, so hosts fall back to reading and writing. RECEIVE COPY
// RESULTS reports the copy manager's limits and, per I_T nexus, the status
// of copies that had a list identifier. LUConfig.NoExtendedCopy turns it
// off.
//
// Not implemented (INVALID COMMAND OPERATION CODE): FORMAT UNIT, SANITIZE,
// LOG SELECT, the LID4 third-party copy commands (EXTENDED COPY(LID4),
// POPULATE TOKEN, WRITE USING TOKEN), RECEIVE COPY RESULTS RECEIVE DATA and
// FAILED SEGMENT DETAILS, the 32-byte variable-length CDBs (READ(32),
// ORWRITE(32)...), protection information (xxPROTECT fields other than 0
// are refused), ACA (NACA 1 and ACA tasks are refused), REGISTER AND MOVE,
// SPEC_I_PT and APTPL.
//
// # Asymmetric logical unit access
//
// A target's ports form target port groups (TargetConfig.PortGroups:
// ID, ALUAState, relative target ports; without any, one active/optimized
// group TargetConfig.PortGroup), so that several gateways exporting one LU
// (same NAA and serial, distinct relative target ports and groups) let
// hosts multipath by access state, as ceph-iscsi's LIO gateways do. The
// standard INQUIRY data reports TPGS 01b (implicit ALUA only: SET TARGET
// PORT GROUPS is not supported), VPD page 83h the relative target port and
// target port group of the session's port, and REPORT TARGET PORT GROUPS
// every group (both header formats). Commands through a port whose group
// is standby, unavailable, transitioning or offline pass LIO's per-state
// filters or fail with NOT READY and 04h/0Bh, 04h/0Ch, 04h/0Ah or 04h/12h.
// Target.SetPortGroupState changes a group's state live and establishes
// ASYMMETRIC ACCESS STATE CHANGED (2Ah/06h) on every nexus of the target.
// LUConfig.NoReservations turns reservations off (LIO's emulate_pr=0), for
// LUs whose gateways would not share them.
//
// # Sense data
//
// Sense data is fixed format (70h) unless D_SENSE is set in the control
// mode page, then descriptor format (72h) with information and
// sense-key-specific descriptors. Backstore errors map to sense data: a
// *backstore.RangeError out of range to LOGICAL BLOCK ADDRESS OUT OF RANGE,
// ErrReadOnly to DATA PROTECT/WRITE PROTECTED, ErrUnsupported to INVALID
// COMMAND OPERATION CODE, ErrClosed to NOT READY, ErrNoSpace to DATA
// PROTECT/SPACE ALLOCATION FAILED WRITE PROTECT, ErrTimeout to BUSY status
// (tcmu-runner's answer to a timed-out backend command), ErrFenced to NOT
// READY/TARGET PORT IN UNAVAILABLE STATE (hosts fail over), other errors to MEDIUM
// ERROR (UNRECOVERED READ ERROR or WRITE ERROR) with the LBA in INFORMATION.
//
// # Error counters
//
// Each LU counts the commands it completes with a status other than GOOD:
// CHECK CONDITION by sense key, RESERVATION CONFLICT, BUSY and TASK SET
// FULL by status (LU.ErrorStats, for metrics). The counters are fixed
// arrays of atomics touched only by those completions; a GOOD command pays
// one comparison.
//
// # Concurrency
//
// Target, LU and Session methods are safe for concurrent use. The package
// has no package-level mutable state: every target is independent, which
// is what lets the tests run in parallel.
package scsi
