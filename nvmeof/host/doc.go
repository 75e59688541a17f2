// Package host is rdisk's NVMe over Fabrics host (initiator) over RDMA and
// TCP: it connects to a controller through any rdma.Provider (the pure-Go
// iWARP provider interoperates with Linux nvmet-rdma over siw) or over
// NVMe/TCP (Config.Transport, nvme+tcp:// URLs), brings it up the way the
// Linux host does, and exposes namespaces as blockdev.Devices. The
// Controller, the admin commands and Namespace.Submit run on either
// transport's queues through one internal interface (hostQueue).
//
// # NVMe/TCP
//
// Each queue is a TCP connection (TCP_NODELAY) opened with ICReq/ICResp
// (PFV 0, HPDA 0, MAXR2T 0, the header and data digests asked for; the
// ICResp must enable exactly those, with CPDA 0 and MAXH2CDATA >= 4096, a
// multiple of 4), as Linux nvme-tcp. Writes up to IOCCSZ*16-64 bytes (8 KiB
// on the admin queue, so Fabrics Connect data always) go in the capsule
// (SGL 0x01); other data uses the transport SGL 0x5A: the controller sends
// C2HData, placed at DATAO straight into the request's buffer (SUCCESS
// completes the command without a CapsuleResp), or R2Ts, answered with
// H2CData PDUs of at most MAXH2CDATA bytes. A data digest mismatch fails
// that command with Data Transfer Error; a bad header digest, a PDU for a
// command not in flight, data out of range or a C2HTermReq fail the queue
// (and the controller). Each queue has a receive goroutine and a send
// goroutine that writes queued capsules several per writev and answers
// R2Ts, so the receiver never blocks on the socket. Buffers are plain
// page-aligned memory; nothing on the I/O path allocates.
//
// # Connection
//
// Connect runs, on the admin queue: the NVMe/RDMA CM request (TCP: ICReq) (QID 0,
// HRQSIZE 32, HSQSIZE 31), Fabrics Connect with the host's NQN and ID,
// Property Get CAP and VS, Property Set CC with EN and a poll of CSTS.RDY,
// Identify Controller (checked as Linux nvme_check_ctrl_fabric_info and
// nvme-rdma check it). For an NVM subsystem it then sets Number of Queues,
// enables the asynchronous events the controller offers, posts an
// Asynchronous Event Request, starts Keep Alive every KATO/2 and connects
// the I/O queues (CM request and Fabrics Connect each, one QP per queue).
// Discover does the same with the discovery subsystem and reads its log,
// re-reading it while its generation counter moves.
//
// # Asymmetric Namespace Access
//
// When Identify Controller reports ANA (CMIC bit 3) and the log page sized
// from NANAGRPID and MNAN fits the transfer limit (Linux
// nvme_mpath_init_identify), the host reads the ANA log at connect, on
// every ANA Change notice, after an I/O failed with an ANA status, and
// again every ANATT/10 while a group is in change. Each Namespace keeps
// its state (blockdev.PathReporter: AccessState, RefreshAccessState) and
// its identity (blockdev.Identifier: DiskID, the subsystem NQN with the
// NGUID, EUI-64 or UUID). A request that fails with a path related status
// (status code type 3h) completes with a *blockdev.PathError, which
// matches blockdev.ErrPath, for a multipath layer to try another path.
//
// # Authentication
//
// DH-HMAC-CHAP (package nvmeof/auth) runs as in Linux
// (drivers/nvme/host/auth.c): when the Fabrics Connect result of a queue
// (admin or I/O) has ATR set, that queue runs one exchange before any other
// command: Authentication Send of the AUTH_Negotiate (every hash and group
// unless Config.DHCHAPHashes/DHCHAPGroups restrict them), Authentication
// Receive of the challenge (AL 4096, Linux's CHAP_BUF_SIZE), Send of the
// Reply, Receive of Success1 and, with Config.DHCHAPCtrlSecret, Send of
// Success2 after checking the controller's response. Transaction IDs come
// from a per-controller counter starting at 0, one per exchange. A failure
// fails Connect with an *AuthError naming the queue and the auth.FailureCode
// (the host sends AUTH_Failure2 when it is the one giving up); ATR without
// Config.DHCHAPSecret fails with ErrAuthRequired, ASCR (secure channel
// concatenation) is refused. Controller.Reauthenticate re-runs it on every
// queue. A controller that does not ask is not authenticated, whatever the
// Config.
//
// # I/O
//
// Each I/O queue has a fixed set of command slots, each with its capsule in
// registered memory and its own fast-registration key. A read or a large
// write exposes the request's buffer under the slot's key, remapped for
// that I/O (keyed SGL 0x4F), and the key is invalidated afterwards: by the
// target's Send with Invalidate, which the host checks against the key, or
// locally. Writes up to the controller's in-capsule size (IOCCSZ) go in the
// capsule (SGL 0x01) straight from the request's buffer. Requests larger
// than the transfer limit (MDTS, at most Config.MaxTransfer) are refused;
// blockdev.ReadAt and WriteAt split. A completion with an error status
// yields a *StatusError carrying the NVMe status. Nothing on this path
// allocates.
//
// One goroutine per queue polls its completion queue and delivers
// completions; any transport error or protocol violation fails the whole
// controller (there is no reconnect here): requests in flight complete with
// an error matching blockdev.ErrClosed.
//
// # Concurrency
//
// Controller and Namespace methods are safe for concurrent use. Admin
// commands are synchronous and may run concurrently (up to 30 at once).
package host
