// Package iser holds the iSCSI protocol layer rdisk's iSCSI/TCP and iSER
// transports share: the PDU codec of RFC 7143 (basic header segments for
// every opcode, additional header segments, data segments, CRC32C header
// and data digests), a streaming PDU reader and a vectored writer for TCP,
// serial number arithmetic for the CmdSN, StatSN and DataSN windows, the
// key=value text format, the login and text negotiation engine (every RFC
// 7143 key plus RFC 7145's iSER keys), login state machines for the target
// and the initiator with AuthMethod None and CHAP (one-way and mutual),
// SendTargets discovery, and the iSER header, Hello messages and RDMA CM
// private data of RFC 7145 as Linux lays them out.
//
// The layouts follow RFC 7143 and Linux include/scsi/iscsi_proto.h and
// include/scsi/iser.h; the negotiation behaviour was checked against Linux
// LIO (drivers/target/iscsi), open-iscsi usr/login.c and libiscsi
// lib/login.c, the peers rdisk meets.
//
// # Shape
//
// Headers are typed byte-slice views in the style of gVisor's netstack:
// BHS and the opcode views (SCSICommand, DataIn, LoginRequest...) are []byte
// types with offset constants, accessors, an Encode(*Fields) method that
// writes all 48 bytes into the caller's buffer, and Fields to decode them.
// A view never owns or copies memory; it is valid as long as the caller's
// buffer is. Accessors and Encode assume at least BHSSize bytes: ParseBHS
// and the Reader check that, and no parse function here panics on any
// input. Encode leaves TotalAHSLength and DataSegmentLength zero:
// BHS.SetLengths, the Writer and AppendPDU set them from the segments sent.
//
// # Data path (TCP)
//
// A connection has one Reader (receive goroutine) and one Writer (send
// goroutine):
//
//	r := iser.NewReader(bufio.NewReaderSize(conn, 64<<10))
//	w := iser.NewWriter(conn)
//	p, err := r.ReadPDU(hdrBuf, dataBuf) // views into hdrBuf/dataBuf
//	...
//	iser.DataIn(hdr).Encode(&iser.DataInFields{...})
//	err = w.WritePDU(hdr, nil, payload) // one writev, payload not copied
//
// Both start with digests off and the 8192-byte login limit; after the
// final Login Response apply Session.Params: SetDigests(HeaderDigest,
// DataDigest) on both, Reader.SetMaxRecvDataSegmentLength(
// MaxRecvDataSegmentLength), and never send a data segment longer than
// MaxSendDataSegmentLength. ReadPDU and WritePDU do not allocate.
//
// On iSER each Send carries an ISERHeader followed by the PDU without
// digests or padding: ParseISERHeader then ParsePDU on receive; on send
// ISERHeader.Encode, the opcode view's Encode and BHS.SetLengths into the
// registered send buffer.
//
// # Login
//
// TargetLogin and InitiatorLogin are pure state machines over Login PDUs.
// A target's connection loop:
//
//	tl, err := iser.NewTargetLogin(cfg, tsih)
//	for {
//		p, err := r.ReadPDU(hdr, data)
//		n, st, err := tl.Step(p.BHS, p.Data, rspHdr, rspData)
//		w.WritePDU(rspHdr, nil, rspData[:n]) // always, failures included
//		if st != iser.LoginInProgress { break } // LoginFailed: close
//	}
//	sess, _ := tl.Session()
//
// An initiator calls Start for the first request, then Step with each
// response until LoginDone. Failures carry a LoginStatus (errors.As): the
// target sends it, the initiator reports the one it received.
//
// The negotiation answers every offer with its result function (AND, OR,
// minimum, maximum, list selection), records declarations, answers
// Irrelevant for session-wide keys of a discovery session and for iSER keys
// on TCP, Reject for values out of range, keys sent by the wrong side or in
// the wrong stage and for the obsolete marker keys, and NotUnderstood for
// unknown keys; a key offered twice fails the login. A target proposes a
// key itself only when the RFC default is outside what it accepts. A
// Login Request with an AHS (RFC 7143 defines none) fails the login with
// 02/00 initiator error.
//
// In full feature phase a TextResponder answers Text Requests (SendTargets
// for discovery and normal sessions) and splits long answers across Text
// Responses.
//
// # Errors
//
// Framing errors (ErrHeaderDigest, ErrDataSegmentTooLong) mean the
// connection must be dropped; ErrDataDigest returns the PDU and leaves the
// stream in step. Parse failures are unexported constant sentinels wrapped
// with detail.
//
// # Concurrency
//
// The package has no state. Views are plain slices; the Reader, Writer,
// login engines and TextResponder belong to one goroutine each. A
// TargetConfig is only read and may be shared by all connections.
package iser
