// Package srp is rdisk's SCSI RDMA Protocol (T10 srp-r16a, with SRP2's
// immediate data): information unit codecs, an SRP target that serves the
// SCSI core (package scsi) over any rdma.Provider, and an initiator library
// whose logical units are blockdev.Devices. Over iWARP it logs in through
// the RDMA/CM private data exactly as Linux ib_srp and ib_srpt do, so the
// kernel initiator (ib_srp over siw) and rdisk's target interoperate.
//
// # Information units
//
// Each IU has a Fields struct and either a byte-slice view (LoginReqRDMA,
// LoginRsp, LoginRej, Cmd, Rsp...) with Encode and accessors, or
// Encode/Parse functions; parsers check lengths and opcodes first and return
// errors matching ErrShort, ErrOpcode or ErrLength. Multi-byte fields are
// big-endian; tags are opaque eight bytes echoed back. ParseData checks the
// data buffer descriptors of an SRP_CMD (direct, indirect with the table in
// the IU or not, immediate) and reports problems as *FormatError: those
// srp-r16a answers with SRP_T_LOGOUT carry its reason, the others are a
// CHECK CONDITION (INVALID FIELD IN COMMAND INFORMATION UNIT) with a field
// pointer. URL, PortID and the GUID helpers name target ports as ib_srp's
// add_target does.
//
// # Target
//
//	t, _ := srp.NewTarget(srp.Config{Logger: log})
//	port, _ := t.AddPort(srp.PortConfig{IDExt: srp.DefaultIDExt, IOCGUID: srp.DefaultIOCGUID, AllowAnyInitiator: true})
//	lu, _ := scsi.NewLU(disk, scsi.LUConfig{MaxTransferBlocks: uint32(t.Config().MaxTransfer / disk.BlockSize())})
//	port.Map(0, lu)
//	addr, _ := t.Listen(ctx, provider, "0.0.0.0:5555") // or t.ListenAndServe
//	fmt.Println(port.URL(addr.String()))                  // srp://HOST:5555/ID_EXT/IOC_GUID
//
// A login (srp_login_req_rdma in the connect private data) is checked as
// Linux srpt does: the IU length (RejITIULenTooLarge), the target port
// identifier (RejUnableAssociateChannel), the required buffer formats
// (RejUnsupportedDescFormat), the ACL (RejUnableEstablishChannel), the
// multi-channel action and channel limits; the SRP_LOGIN_RSP is the accept
// private data and SRP_LOGIN_REJ the reject private data. Channels of one
// initiator port on one target port form an I_T nexus sharing one
// scsi.Session; a login with MULTI-CHANNEL ACTION 0 logs the others out.
//
// Each channel posts QueueDepth+1 receive buffers and grants QueueDepth
// credits in the login response. A receive buffer goes back to the
// initiator before the response that returns its credit (REQUEST LIMIT
// DELTA: one plus the credits freed meanwhile). Credits of commands that
// end without a response (aborted by their own nexus) go back with the
// next response or, when none is coming or the initiator runs low, with
// SRP_CRED_REQ; the target keeps at most one request (CRED_REQ, AER_REQ)
// outstanding. Port.Map, Unmap and CapacityChanged send SRP_AER_REQ with
// REPORTED LUNS DATA HAS CHANGED or CAPACITY DATA HAS CHANGED.
//
// Data-out is pulled with RDMA Read (one per descriptor, as many in flight
// as the initiator's IRD allows; an indirect table not wholly in the IU is
// fetched first, or refused with Config.NoExternalTables) into a per-slot
// registered buffer, or used in place when it came as immediate data (the
// receive buffers put it on a 4 KiB boundary for O_DIRECT backstores);
// data-in goes by RDMA Write before the SRP_RSP. Residuals map to
// DOUNDER/DOOVER/DIUNDER/DIOVER. Task management functions run the SCSI
// core's aborts and resets on their own goroutine; commands not yet in the
// core (RDMA Read in flight, queued) are dropped by the transport.
//
// One goroutine per channel polls its CQ, parses IUs and posts RDMA
// operations; commands on disks that never block (RAM, null) run there,
// others on Config.Workers goroutines per channel. Target and Port methods
// are safe for concurrent use.
//
// # Initiator
//
//	s, _ := srp.Login(ctx, provider, "10.0.0.1:5555", srp.MakePortID(idExt, iocGUID), srp.InitiatorConfig{Channels: 2})
//	luns, _ := s.ReportLUNs(ctx)
//	dev, _ := s.Device(ctx, luns[0]) // blockdev.Device
//	// or: dev, _ := srp.Open(ctx, provider, url, cfg); infos, _ := srp.Discover(ctx, provider, url, cfg)
//
// A Session logs in Channels channels (the first with MULTI-CHANNEL ACTION
// 0, the others 1, as ib_srp's ch_count), asks for immediate data, and
// keeps at most the target's credits minus one (kept for task management)
// commands in flight per channel: Submit blocks until a slot and a credit
// are free. Writes that fit go as immediate data, others name the buffer
// through a per-I/O fast-registration key (direct descriptor; Policy
// forces indirect tables, in or out of the IU, for tests). It answers
// SRP_CRED_REQ and SRP_AER_REQ, treats SRP_T_LOGOUT as the end of the
// channel (LogoutError), retries I/O after unit attentions, and logs out
// with SRP_I_LOGOUT on Close. Session and Device methods are safe for
// concurrent use; completion callbacks run on the channel's goroutine.
package srp
