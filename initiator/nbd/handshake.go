package nbd

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// errAbort is the client's NBD_OPT_ABORT: a clean end of the negotiation.
var errAbort = errors.New("nbd: client aborted the negotiation")

// negotiation is the server side of one fixed-newstyle handshake. It reads
// options from br and writes replies to bw, flushing after each.
type negotiation struct {
	br     *bufio.Reader
	bw     *bufio.Writer
	lookup func(name string) *Export
	list   func() []*Export
	// blockInfo reports the block size constraints of an export.
	blockInfo func(e *Export) (min, pref, max uint32)
	tflags    func(e *Export) uint16

	clientFlags uint32
	// askedBlockSize: the GO that ended the negotiation asked for
	// NBD_INFO_BLOCK_SIZE, so the client honours the minimum block size.
	askedBlockSize bool
	hdr            [optReplySize]byte
	opt            []byte // option data, reused
}

// run performs the handshake and returns the export the client chose.
func (n *negotiation) run() (*Export, error) {
	var b [18]byte
	binary.BigEndian.PutUint64(b[0:], magicNBD)
	binary.BigEndian.PutUint64(b[8:], magicIHaveOpt)
	binary.BigEndian.PutUint16(b[16:], flagFixedNewstyle|flagNoZeroes)
	if _, err := n.bw.Write(b[:18]); err != nil {
		return nil, err
	}
	if err := n.bw.Flush(); err != nil {
		return nil, err
	}
	if _, err := io.ReadFull(n.br, b[:4]); err != nil {
		return nil, fmt.Errorf("reading client flags: %w", err)
	}
	n.clientFlags = binary.BigEndian.Uint32(b[:4])
	if n.clientFlags&^(clientFixedNewstyle|clientNoZeroes) != 0 {
		return nil, fmt.Errorf("unknown client flags %#x", n.clientFlags)
	}
	for {
		e, err := n.option()
		if err != nil || e != nil {
			return e, err
		}
	}
}

// option reads and answers one option. It returns the export when the
// negotiation is over (EXPORT_NAME or a successful GO).
func (n *negotiation) option() (*Export, error) {
	var h [optHeaderSize]byte
	if _, err := io.ReadFull(n.br, h[:]); err != nil {
		return nil, fmt.Errorf("reading an option: %w", err)
	}
	if binary.BigEndian.Uint64(h[0:]) != magicIHaveOpt {
		return nil, fmt.Errorf("bad option magic %#x", binary.BigEndian.Uint64(h[0:]))
	}
	opt := binary.BigEndian.Uint32(h[8:])
	length := binary.BigEndian.Uint32(h[12:])
	if length > maxOptionLen {
		// Skip the data and refuse, as the protocol allows, unless it is
		// absurd.
		if length > 16<<20 {
			return nil, fmt.Errorf("option %d with %d bytes of data", opt, length)
		}
		if _, err := io.CopyN(io.Discard, n.br, int64(length)); err != nil {
			return nil, err
		}
		if opt == optExportName {
			return nil, fmt.Errorf("export name of %d bytes", length)
		}
		return nil, n.replyErr(opt, repErrTooBig, "option data too long")
	}
	if cap(n.opt) < int(length) {
		n.opt = make([]byte, length)
	}
	data := n.opt[:length]
	if _, err := io.ReadFull(n.br, data); err != nil {
		return nil, fmt.Errorf("reading option %d data: %w", opt, err)
	}
	switch opt {
	case optExportName:
		e := n.lookup(string(data))
		if e == nil {
			return nil, fmt.Errorf("unknown export %q", truncName(data))
		}
		var b [8 + 2 + 124]byte
		binary.BigEndian.PutUint64(b[0:], uint64(e.Dev.Info().Size))
		binary.BigEndian.PutUint16(b[8:], n.tflags(e))
		k := len(b)
		if n.clientFlags&clientNoZeroes != 0 {
			k = 10
		}
		if _, err := n.bw.Write(b[:k]); err != nil {
			return nil, err
		}
		return e, n.bw.Flush()
	case optAbort:
		// Best effort: the client may already have hung up.
		_ = n.reply(opt, repAck, nil)
		return nil, errAbort
	case optList:
		if length != 0 {
			return nil, n.replyErr(opt, repErrInvalid, "NBD_OPT_LIST takes no data")
		}
		for _, e := range n.list() {
			var l [4]byte
			binary.BigEndian.PutUint32(l[:], uint32(len(e.Name)))
			if err := n.reply(opt, repServer, l[:], []byte(e.Name)); err != nil {
				return nil, err
			}
		}
		return nil, n.reply(opt, repAck, nil)
	case optInfo, optGo:
		return n.infoGo(opt, data)
	case optStartTLS:
		return nil, n.replyErr(opt, repErrUnsup, "TLS is not supported by this server")
	default:
		// Structured replies, metadata contexts, extended headers and
		// anything newer: not implemented.
		return nil, n.replyErr(opt, repErrUnsup, "")
	}
}

// infoGo answers NBD_OPT_INFO and NBD_OPT_GO: name length(4) name
// count(2) info-types(2 each).
func (n *negotiation) infoGo(opt uint32, data []byte) (*Export, error) {
	if len(data) < 4 {
		return nil, n.replyErr(opt, repErrInvalid, "option data too short")
	}
	nameLen := binary.BigEndian.Uint32(data)
	if uint64(nameLen) > uint64(len(data)-4) || len(data)-4-int(nameLen) < 2 {
		return nil, n.replyErr(opt, repErrInvalid, "option data too short for its name")
	}
	name := data[4 : 4+nameLen]
	rest := data[4+nameLen:]
	count := int(binary.BigEndian.Uint16(rest))
	rest = rest[2:]
	if len(rest) != 2*count {
		return nil, n.replyErr(opt, repErrInvalid, "option length does not match its information request count")
	}
	var wantName, wantDesc, wantBlock bool
	for i := range count {
		switch binary.BigEndian.Uint16(rest[2*i:]) {
		case infoName:
			wantName = true
		case infoDescription:
			wantDesc = true
		case infoBlockSize:
			wantBlock = true
		}
	}
	e := n.lookup(string(name))
	if e == nil {
		return nil, n.replyErr(opt, repErrUnknown, "no export named "+truncName(name))
	}
	var b [14]byte
	binary.BigEndian.PutUint16(b[0:], infoExport)
	binary.BigEndian.PutUint64(b[2:], uint64(e.Dev.Info().Size))
	binary.BigEndian.PutUint16(b[10:], n.tflags(e))
	if err := n.reply(opt, repInfo, b[:12]); err != nil {
		return nil, err
	}
	// Block sizes go to every client (as qemu-nbd does); one that did not
	// ask may use any alignment (minimum 1), which the server handles by
	// read-modify-write.
	mn, pref, mx := n.blockInfo(e)
	if !wantBlock {
		mn = 1
	}
	binary.BigEndian.PutUint16(b[0:], infoBlockSize)
	binary.BigEndian.PutUint32(b[2:], mn)
	binary.BigEndian.PutUint32(b[6:], pref)
	binary.BigEndian.PutUint32(b[10:], mx)
	if err := n.reply(opt, repInfo, b[:14]); err != nil {
		return nil, err
	}
	if wantName {
		binary.BigEndian.PutUint16(b[0:], infoName)
		if err := n.reply(opt, repInfo, b[:2], []byte(e.Name)); err != nil {
			return nil, err
		}
	}
	if wantDesc && e.Description != "" {
		binary.BigEndian.PutUint16(b[0:], infoDescription)
		if err := n.reply(opt, repInfo, b[:2], []byte(e.Description)); err != nil {
			return nil, err
		}
	}
	if err := n.reply(opt, repAck, nil); err != nil {
		return nil, err
	}
	if opt == optGo {
		n.askedBlockSize = wantBlock
		return e, nil
	}
	return nil, nil
}

// reply sends one option reply whose data is the concatenation of parts.
func (n *negotiation) reply(opt, typ uint32, parts ...[]byte) error {
	total := 0
	for _, p := range parts {
		total += len(p)
	}
	binary.BigEndian.PutUint64(n.hdr[0:], magicOptReply)
	binary.BigEndian.PutUint32(n.hdr[8:], opt)
	binary.BigEndian.PutUint32(n.hdr[12:], typ)
	binary.BigEndian.PutUint32(n.hdr[16:], uint32(total))
	if _, err := n.bw.Write(n.hdr[:]); err != nil {
		return err
	}
	for _, p := range parts {
		if _, err := n.bw.Write(p); err != nil {
			return err
		}
	}
	return n.bw.Flush()
}

// replyErr sends an error reply with a message (errors carry a string).
func (n *negotiation) replyErr(opt, typ uint32, msg string) error {
	return n.reply(opt, typ, []byte(msg))
}

// truncName quotes an export name for messages, bounded.
func truncName(b []byte) string {
	if len(b) > 64 {
		return fmt.Sprintf("%q...", b[:64])
	}
	return fmt.Sprintf("%q", b)
}
