// Package target is rdisk's NVMe over Fabrics target: NVM subsystems with
// namespaces on backstore disks, exported through ports, and the
// controllers hosts create on them.
//
//	t, _ := target.New(target.Config{Provider: provider, Logger: log})
//	sub, _ := t.AddSubsystem(target.SubsystemConfig{NQN: nqn, AllowAnyHost: true})
//	sub.AddNamespace(target.NamespaceConfig{NSID: 1, Disk: disk})
//	port, _ := t.AddPort(target.PortConfig{ID: 1, Addr: "0.0.0.0:4420"})
//	port.LinkSubsystem(sub)
//
// The package is cut as Linux nvmet is. The controller core knows nothing
// of RDMA: submission queues (core.go) decode commands, check them against
// the controller's state and run them; controllers (controller.go) hold
// the registers, keep-alive, asynchronous events and the error log;
// fabrics.go, admin.go and io.go execute Fabrics, admin and NVM commands;
// a discovery controller serves the discovery log. Commands on disks that
// may wait for a device (backstore.TraitsOf) run on a bounded pool of
// workers per queue; others on the queue's own goroutine.
//
// A transport binding carries the queues: it receives capsules, puts each
// command's host data in place and calls the core, which answers through
// the binding's respond, as nvmet's core does through a transport's
// queue_response. The RDMA binding (rdma.go) runs each queue on an
// rdmaq.TargetQueue: the NVMe/RDMA CM private data, capsules whose
// in-capsule data lands page aligned, keyed SGLs served by RDMA Read and
// RDMA Write (straight from a RAM disk's memory through the provider's
// implicit MR; and a Write's RDMA Read straight into a RAM disk's memory
// through its implicit write MR, backstore.Placer, once every check the
// Write would fail has passed: see sq.placeWrite), completions by Send,
// with Invalidate of the host's key when the SGL asks for it.
//
// Several targets may export one disk as gateways of one subsystem (the
// same NQN and namespace identifiers, distinct CntlIDMin..CntlIDMax), with
// hosts multipathing across them by Asymmetric Namespace Access (ana.go),
// as nvmet does: each namespace is in an ANA group
// (NamespaceConfig.ANAGroupID, group 1 by default), each port gives each
// group a state (PortConfig.ANAGroups, Port.SetANAState: group 1 optimized
// unless set, a group the port lacks inaccessible), Identify Controller
// reports ANA (CMIC, ANACAP, ANATT from Config.ANATransitionTime,
// ANAGRPMAX and NANAGRPID 128) so that Linux enables native multipath,
// the ANA log (LID 0Ch, RGO too) gives the states on the controller's
// port, a change sends an ANA Change notice to the controllers concerned,
// and I/O to a namespace whose group is inaccessible, persistent-loss or
// changing on the port fails with ANA Inaccessible, ANA Persistent Loss or
// ANA Transition (DNR clear: the host goes to another path). A disk that
// reports it was fenced off its store (backstore.ErrFenced) fails I/O with
// Internal Path Error, another path related status.
//
// On a disk that implements backstore.AsyncDisk (a network store), Reads,
// Writes, Flushes, Write Zeroes and deallocations are started with Start
// on the queue goroutine and answered from the disk's Done (async.go), so
// one queue keeps its whole depth in flight; queue teardown waits for
// them.
//
// A stalled or hostile peer cannot hold a connection (timeout.go): a
// queue that has not completed a Fabrics Connect within
// Config.ConnectTimeout of its transport connection (10 s by default; the
// MPA request or the ICReq included) is closed, and so is an NVMe/TCP
// queue whose PDU, once begun, has not arrived whole within
// Config.TCPPDUTimeout (30 s). The keep-alive takes over once a
// controller exists. nvmet has neither timer; the first is a Linux
// host's ICResp timeout, the second its I/O timeout.
//
// A running target is inspected and changed live (manage.go), as nvmet's
// configfs allows: Target.Controllers lists the controllers with their
// queues and I/O counters; DeleteController, RemovePort,
// Port.UnlinkSubsystem and RemoveSubsystem disconnect the controllers
// concerned through the path a keep-alive timeout takes; host access and
// namespaces change with discovery and namespace change events.
//
// For a metrics collector, Target.Stats counts connections per port and
// transport (accepted, live, refused by reason), controllers created and
// removed, keep-alive expiries, authentication failures and refused
// Fabrics Connects by reason; Subsystem.NamespaceStats the I/O commands
// in flight and the error completions by status code type of each
// namespace. They are read at scrape time: the I/O path pays one atomic
// add per command when it begins and one when its completion is sent,
// on its namespace, and nothing else. The log (Config.Logger) has one
// line per connection accepted (Debug), per controller created and
// removed (Info, the latter with a reason from a fixed set) and per
// refusal (Warn), never one per I/O, with the same keys throughout:
// port, transport, peer, subsystem, host, cntlid, qid, reason, err.
//
// Target.Drain stops the target gracefully: listeners closed, Connects
// refused, the I/O commands received answered, then the controllers
// disconnected. NVMe over Fabrics has no message by which a target tells
// a host it goes away; hosts see their queues end and reconnect, as with
// Linux nvmet.
//
// Target, Subsystem and Port methods are safe for concurrent use.
package target
