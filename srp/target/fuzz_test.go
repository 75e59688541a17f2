package target

import (
	"bytes"
	"encoding/binary"
	"testing"
	"time"

	"github.com/rdisk/rdisk/backstore"
	"github.com/rdisk/rdisk/rdma"
	"github.com/rdisk/rdisk/srp"
)

// FuzzChannel feeds arbitrary IUs, as RDMA Sends, to a live channel after
// a valid login over the software iWARP provider: the target must never
// panic, hang or keep the channel once the initiator is gone. The
// initiator exposes a data region for the target's RDMA Reads and Writes:
// in an IU, the bytes "RKEY" stand for its key and "VADR" plus a 4-byte
// offset for an address in it (an offset past its end, or any other key,
// is a bad descriptor the target must survive too).
//
// The input is a series of IUs, each a 2-byte big-endian length and its
// bytes (at most fuzzMaxIUs of them). opts: bit 0 logs in with immediate
// data, bit 1 ends with SRP_I_LOGOUT instead of a disconnect.
func FuzzChannel(f *testing.F) {
	lt := startTarget(f, Config{QueueDepth: fuzzDepth, MaxChannels: 2}, PortConfig{}, memDisk(f, 1<<20))
	var ipid uint64
	f.Fuzz(func(t *testing.T, b []byte, opts uint8) {
		ipid++
		fuzzChannel(t, lt, srp.MakePortID(0xf, ipid), b, opts)
	})
}

const (
	fuzzDepth   = 8
	fuzzMaxIUs  = 7 // with an SRP_I_LOGOUT, the 8 send buffers of rawConn
	fuzzDataLen = 64 << 10
	// fuzzImmOff is the immediate data offset asked (Linux ib_srp's).
	fuzzImmOff = 68
)

func fuzzChannel(t *testing.T, lt *loopTarget, ipid srp.PortID, b []byte, opts uint8) {
	f := rawLoginFields(ipid)
	maxIU := rawRecvLen
	if opts&1 != 0 {
		f.ReqITIULen, f.ReqFlags, f.ImmDataOffset = rawSendLen, srp.ImmedRequested, fuzzImmOff
		maxIU = rawSendLen
	}
	c, err := rawLogin(t, lt.addr, loginPD(f))
	if err != nil {
		t.Fatalf("login: %v", err)
	}
	data := backstore.AlignedBuffer(fuzzDataLen, 4096)
	mr, err := c.pd.RegisterMemory(data, rdma.AccessLocalWrite|rdma.AccessRemoteRead|rdma.AccessRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	defer mr.Deregister()
	var key [4]byte
	binary.BigEndian.PutUint32(key[:], mr.RKey())

	// Send the IUs, counting those that ask for an answer.
	answers := 0
	for n := 0; n < fuzzMaxIUs && len(b) >= 2; n++ {
		l := min(int(binary.BigEndian.Uint16(b)), len(b)-2, maxIU)
		iu := bytes.ReplaceAll(bytes.Clone(b[2:2+l]), []byte("RKEY"), key[:])
		b = b[2+l:]
		for i := bytes.Index(iu, []byte("VADR")); i >= 0 && i+8 <= len(iu); i = bytes.Index(iu, []byte("VADR")) {
			binary.BigEndian.PutUint64(iu[i:], mr.VA()+uint64(binary.BigEndian.Uint32(iu[i+4:])))
		}
		if len(iu) > 0 && (srp.Opcode(iu[0]) == srp.OpCmd || srp.Opcode(iu[0]) == srp.OpTskMgmt) {
			answers++
		}
		if !fuzzSend(c, iu) {
			break
		}
	}
	// Wait for the answers (an aborted command gets none, a logout ends
	// the channel), for a short while.
	deadline := time.Now().Add(500 * time.Millisecond)
	for answers > 0 && c.qp.Err() == nil && time.Now().Before(deadline) {
		iu := c.recv(100 * time.Millisecond)
		if len(iu) == 0 {
			continue
		}
		switch srp.Opcode(iu[0]) {
		case srp.OpRsp:
			answers--
		case srp.OpTLogout:
			answers = 0
		}
	}
	if opts&2 != 0 {
		var lo [srp.ILogoutSize]byte
		srp.EncodeILogout(lo[:], 0x10)
		fuzzSend(c, lo[:])
	}
	c.qp.Close()
	end := time.Now().Add(5 * time.Second)
	for lt.port.Channels() != 0 {
		if time.Now().After(end) {
			t.Fatalf("the target still has %d channels 5 s after the initiator went away", lt.port.Channels())
		}
		time.Sleep(time.Millisecond)
	}
}

// fuzzSend posts iu as a Send, as rawConn.send does, but reports a failure
// (the target may have ended the connection) instead of failing the test.
func fuzzSend(c *rawConn, iu []byte) bool {
	off := rawRecvs*rawRecvLen + c.turn*rawSendLen
	c.turn = (c.turn + 1) % 8
	copy(c.buf[off:], iu)
	wr := rdma.SendWR{ID: 1 << 40, Op: rdma.OpSend, SGL: []rdma.SGE{{MR: c.mr, Offset: off, Length: len(iu)}}}
	return c.qp.PostSend(&wr) == nil
}
