package nbd

import (
	"encoding/binary"
	"fmt"
)

// Handshake magics and flags (fixed newstyle negotiation).
const (
	magicNBD      = 0x4e42444d41474943 // "NBDMAGIC"
	magicIHaveOpt = 0x49484156454F5054 // "IHAVEOPT"
	magicOptReply = 0x0003e889045565a9

	flagFixedNewstyle = 1 << 0 // server handshake flags
	flagNoZeroes      = 1 << 1

	clientFixedNewstyle = 1 << 0 // client flags
	clientNoZeroes      = 1 << 1
)

// Options.
const (
	optExportName      = 1
	optAbort           = 2
	optList            = 3
	optPeekExport      = 4
	optStartTLS        = 5
	optInfo            = 6
	optGo              = 7
	optStructuredReply = 8
	optListMetaContext = 9
	optSetMetaContext  = 10
	optExtendedHeaders = 11
)

// Option reply types.
const (
	repAck        = 1
	repServer     = 2
	repInfo       = 3
	repFlagError  = 1 << 31
	repErrUnsup   = repFlagError | 1
	repErrPolicy  = repFlagError | 2
	repErrInvalid = repFlagError | 3
	repErrUnknown = repFlagError | 6
	repErrTooBig  = repFlagError | 9
)

// Information types of NBD_REP_INFO.
const (
	infoExport      = 0
	infoName        = 1
	infoDescription = 2
	infoBlockSize   = 3
)

// Transmission flags.
const (
	tflagHasFlags       = 1 << 0
	tflagReadOnly       = 1 << 1
	tflagSendFlush      = 1 << 2
	tflagSendFUA        = 1 << 3
	tflagRotational     = 1 << 4
	tflagSendTrim       = 1 << 5
	tflagSendWriteZeroe = 1 << 6
	tflagCanMultiConn   = 1 << 8
)

// Commands.
const (
	cmdRead        = 0
	cmdWrite       = 1
	cmdDisc        = 2
	cmdFlush       = 3
	cmdTrim        = 4
	cmdCache       = 5
	cmdWriteZeroes = 6
	cmdBlockStatus = 7
)

// Command flags.
const (
	cmdFlagFUA    = 1 << 0
	cmdFlagNoHole = 1 << 1
)

// Error values of simple replies (Linux errno numbers, as the protocol
// fixes them).
const (
	errPerm     = 1
	errIO       = 5
	errNoMem    = 12
	errInval    = 22
	errNoSpc    = 28
	errOverflow = 75
	errNotSup   = 95
	errShutdown = 108
)

// Wire sizes.
const (
	requestSize     = 28
	simpleReplySize = 16
	optHeaderSize   = 16
	optReplySize    = 20
	magicRequest    = 0x25609513
	magicSimple     = 0x67446698

	// maxOptionLen bounds the data of one option; NBD strings are at most
	// 4096 bytes, so real options are far smaller.
	maxOptionLen = 64 << 10
	// maxString is the protocol's bound on export names and messages.
	maxString = 4096
)

// requestHeader is a view of the 28-byte transmission request:
// magic(4) flags(2) type(2) cookie(8) offset(8) length(4).
type requestHeader []byte

func (h requestHeader) magic() uint32  { return binary.BigEndian.Uint32(h[0:]) }
func (h requestHeader) flags() uint16  { return binary.BigEndian.Uint16(h[4:]) }
func (h requestHeader) typ() uint16    { return binary.BigEndian.Uint16(h[6:]) }
func (h requestHeader) cookie() uint64 { return binary.BigEndian.Uint64(h[8:]) }
func (h requestHeader) offset() uint64 { return binary.BigEndian.Uint64(h[16:]) }
func (h requestHeader) length() uint32 { return binary.BigEndian.Uint32(h[24:]) }

// encodeRequest writes a request header into b (client side, for tests).
func encodeRequest(b []byte, flags, typ uint16, cookie, off uint64, length uint32) {
	binary.BigEndian.PutUint32(b[0:], magicRequest)
	binary.BigEndian.PutUint16(b[4:], flags)
	binary.BigEndian.PutUint16(b[6:], typ)
	binary.BigEndian.PutUint64(b[8:], cookie)
	binary.BigEndian.PutUint64(b[16:], off)
	binary.BigEndian.PutUint32(b[24:], length)
}

// encodeSimpleReply writes a simple reply header into b.
func encodeSimpleReply(b []byte, errno uint32, cookie uint64) {
	binary.BigEndian.PutUint32(b[0:], magicSimple)
	binary.BigEndian.PutUint32(b[4:], errno)
	binary.BigEndian.PutUint64(b[8:], cookie)
}

// Verdicts of checkRequest: what the server does with a request.
type verdict uint8

const (
	// doIO: valid; run it.
	doIO verdict = iota
	// replyError: reply with the errno (consuming a write's payload first).
	replyError
	// hangUp: the stream cannot be trusted any more; close the connection.
	hangUp
	// disconnect: NBD_CMD_DISC.
	disconnect
)

// String names the verdict.
func (v verdict) String() string {
	switch v {
	case doIO:
		return "io"
	case replyError:
		return "error"
	case hangUp:
		return "hang-up"
	case disconnect:
		return "disconnect"
	}
	return fmt.Sprintf("verdict(%d)", uint8(v))
}

// limits is what checkRequest validates against.
type limits struct {
	size       int64
	tflags     uint16 // transmission flags sent to the client
	maxPayload int    // largest write payload accepted (beyond: hang up)
}

// checkRequest decides what to do with a request header: the parse-then-
// execute split. It returns an errno for replyError.
func checkRequest(h requestHeader, lim limits) (verdict, uint32) {
	if len(h) < requestSize || h.magic() != magicRequest {
		return hangUp, 0
	}
	typ, flags := h.typ(), h.flags()
	off, n := h.offset(), uint64(h.length())
	if typ == cmdWrite && n > uint64(lim.maxPayload) {
		// A payload we will not read; the stream is lost.
		return hangUp, 0
	}
	if flags&^(cmdFlagFUA|cmdFlagNoHole) != 0 {
		return replyError, errInval
	}
	if flags&cmdFlagFUA != 0 && lim.tflags&tflagSendFUA == 0 {
		return replyError, errInval
	}
	switch typ {
	case cmdDisc:
		return disconnect, 0
	case cmdFlush:
		if off != 0 || n != 0 {
			return replyError, errInval
		}
		return doIO, 0
	case cmdRead, cmdWrite, cmdTrim, cmdWriteZeroes:
	default:
		return replyError, errInval
	}
	if typ == cmdTrim && lim.tflags&tflagSendTrim == 0 || typ == cmdWriteZeroes && lim.tflags&tflagSendWriteZeroe == 0 {
		return replyError, errInval
	}
	if flags&cmdFlagNoHole != 0 && typ != cmdWriteZeroes {
		return replyError, errInval
	}
	if lim.tflags&tflagReadOnly != 0 && typ != cmdRead {
		return replyError, errPerm
	}
	if n == 0 {
		return replyError, errInval
	}
	if off > uint64(lim.size) || n > uint64(lim.size)-off {
		if typ == cmdWrite || typ == cmdWriteZeroes {
			return replyError, errNoSpc
		}
		return replyError, errInval
	}
	if typ == cmdRead && n > uint64(lim.maxPayload) {
		return replyError, errOverflow
	}
	return doIO, 0
}
