// Package target is rdisk's SRP target: target ports (an id_ext/ioc_guid
// pair, a SCSI target of LUNs and an ACL) served on RDMA/CM listeners over
// any rdma.Provider, with the IU codecs of package srp.
//
//	t, _ := target.New(target.Config{Logger: log})
//	port, _ := t.AddPort(target.PortConfig{IDExt: srp.DefaultIDExt, IOCGUID: srp.DefaultIOCGUID, AllowAnyInitiator: true})
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
// REPORTED LUNS DATA HAS CHANGED or CAPACITY DATA HAS CHANGED, and
// Port.SetPortGroupState (ALUA: PortConfig.PortGroups, the port's
// RelativeTargetPort) one with ASYMMETRIC ACCESS STATE CHANGED per LUN.
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
// A login whose I_T nexus receives no IU within Config.FirstIUTimeout
// (30 s by default) is logged out (SRP_T_LOGOUT, Inactive RDMA channel;
// on iWARP, where the target may not send first, just disconnected), so
// a peer that logs in and stalls does not hold a channel. Idle channels
// of a nexus that has carried IUs stay, as with Linux srpt, which has no
// timer after the connection is established (RTU, or RDMA/CM
// ESTABLISHED) and none for the first IU either.
//
// Live management: Target.Ports and Target.Channels list the ports and
// the logged-in channels (with counters of commands answered and data
// moved); CloseChannel logs one channel out (SRP_T_LOGOUT, then a
// disconnect); Port.SetACL replaces a port's ACL for new logins;
// Port.LUNs lists its LUN map.
//
// Metrics, logs and drain: Target.Stats returns counters for a metrics
// collector (logins, logins refused and channels ended by reason, from
// fixed documented sets, commands by descriptor format, the channels
// live); they move once per login, channel or IU, with atomics where the
// IU is handled anyway. The logger gets each channel logged in and ended
// (info, with the keys channel, port, initiator, peer, depth, reason) and
// each refused login (warning, with the peer, the port IDs and the
// reason). Target.Drain closes the listeners, refuses logins
// (RejInsufficientResources), stops granting credits and logs each
// channel out (SRP_T_LOGOUT) once its commands in flight were answered;
// what is left when its context ends is disconnected and named in its
// error.
//
// One goroutine per channel polls its CQ, parses IUs and posts RDMA
// operations; commands on disks that never block (RAM, null) run there,
// READ, WRITE and SYNCHRONIZE CACHE on a backstore.AsyncDisk are started
// there (scsi.Session.Start) and answered from the disk's completion,
// others run on Config.Workers goroutines per channel (COMPARE AND WRITE
// and its kind always do: they may wait for zero-copy reads). Reads of a
// RAM disk into one data descriptor go from the disk's memory straight
// into the RDMA Write through the implicit MR (scsi.Command.Views), held
// until the response's send completes. Target and Port methods are safe
// for concurrent use.
package target
