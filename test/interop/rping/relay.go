package main

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
)

// relay is an in-process TCP relay that logs the iWARP byte stream in both
// directions: the MPA request/reply frame, then every FPDU with its decoded
// MPA/DDP/RDMAP header. It exists for diagnosing interop with siw, where
// no packet capture tool is available in the lab guest.
type relay struct {
	ln     net.Listener
	target string
	log    *slog.Logger
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  []net.Conn
	closed bool
}

func startRelay(listen, target string, log *slog.Logger) (*relay, error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("hexdump relay: %w", err)
	}
	r := &relay{ln: ln, target: target, log: log.With("relay", ln.Addr().String())}
	r.wg.Add(1)
	go r.acceptLoop()
	return r, nil
}

func (r *relay) Addr() net.Addr { return r.ln.Addr() }

func (r *relay) Close() {
	r.mu.Lock()
	r.closed = true
	for _, c := range r.conns {
		_ = c.Close()
	}
	r.mu.Unlock()
	_ = r.ln.Close()
	r.wg.Wait()
}

func (r *relay) track(c net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		_ = c.Close()
		return false
	}
	r.conns = append(r.conns, c)
	return true
}

func (r *relay) acceptLoop() {
	defer r.wg.Done()
	for {
		in, err := r.ln.Accept()
		if err != nil {
			return
		}
		if !r.track(in) {
			return
		}
		out, err := net.Dial("tcp", r.target)
		if err != nil {
			r.log.Error("relay dial", "target", r.target, "err", err)
			_ = in.Close()
			continue
		}
		if !r.track(out) {
			_ = in.Close()
			return
		}
		if tc, ok := out.(*net.TCPConn); ok {
			_ = tc.SetNoDelay(true)
		}
		if tc, ok := in.(*net.TCPConn); ok {
			_ = tc.SetNoDelay(true)
		}
		r.log.Info("relay connection", "from", in.RemoteAddr(), "to", out.RemoteAddr())
		// Name the directions after who sends: the accepted side is the
		// MPA initiator.
		r.wg.Add(2)
		go r.pipe(out, in, &tap{log: r.log, dir: "initiator->responder"})
		go r.pipe(in, out, &tap{log: r.log, dir: "responder->initiator"})
	}
}

func (r *relay) pipe(dst, src net.Conn, t *tap) {
	defer r.wg.Done()
	_, err := io.Copy(dst, io.TeeReader(src, t))
	t.flush()
	if err != nil && !errors.Is(err, net.ErrClosed) {
		r.log.Info("relay stream ended", "dir", t.dir, "err", err)
	} else {
		r.log.Info("relay stream ended", "dir", t.dir, "bytes", t.total)
	}
	// Pass the half-close on (siw and the provider see a FIN, like a direct connection).
	if tc, ok := dst.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	} else {
		_ = dst.Close()
	}
}

// tap decodes one direction of an MPA stream. It never fails the relay:
// undecodable bytes are logged as raw hex.
type tap struct {
	log     *slog.Logger
	dir     string
	buf     []byte
	total   int
	mpaDone bool
	raw     bool // stop decoding, log raw
	n       int  // FPDUs seen
}

const maxHexDump = 96

func (t *tap) Write(p []byte) (int, error) {
	t.total += len(p)
	t.buf = append(t.buf, p...)
	t.parse()
	return len(p), nil
}

func (t *tap) flush() {
	if len(t.buf) > 0 {
		t.log.Info("wire: trailing partial frame", "dir", t.dir, "bytes", len(t.buf), "hex", hexClip(t.buf))
		t.buf = nil
	}
}

func (t *tap) parse() {
	for len(t.buf) > 0 {
		if t.raw {
			t.log.Info("wire: raw", "dir", t.dir, "bytes", len(t.buf), "hex", hexClip(t.buf))
			t.buf = t.buf[:0]
			return
		}
		if !t.mpaDone {
			n, line, ok := decodeMPA(t.buf)
			if n == 0 {
				return // need more
			}
			t.log.Info("wire: MPA "+line, "dir", t.dir, "hex", hex.EncodeToString(t.buf[:n]))
			t.buf = t.buf[n:]
			t.mpaDone = true
			if !ok {
				t.raw = true
			}
			continue
		}
		n, line := decodeFPDU(t.buf)
		if n == 0 {
			return
		}
		if n < 0 {
			t.log.Warn("wire: cannot frame FPDU, dumping raw from here", "dir", t.dir, "hex", hexClip(t.buf))
			t.raw = true
			continue
		}
		t.log.Info(fmt.Sprintf("wire: FPDU #%d %s", t.n, line), "dir", t.dir, "hex", hexClip(t.buf[:n]))
		t.n++
		t.buf = t.buf[n:]
	}
}

func hexClip(b []byte) string {
	if len(b) > maxHexDump {
		return hex.EncodeToString(b[:maxHexDump]) + fmt.Sprintf("...(+%d bytes)", len(b)-maxHexDump)
	}
	return hex.EncodeToString(b)
}

// decodeMPA decodes an MPA request/reply frame at the start of b. It
// returns the frame length (0 = incomplete) and a one-line description;
// ok is false when b does not look like an MPA frame or it is a reject.
func decodeMPA(b []byte) (n int, line string, ok bool) {
	if len(b) < 20 {
		return 0, "", false
	}
	key := string(b[:16])
	flags, rev := b[16], b[17]
	pdLen := int(binary.BigEndian.Uint16(b[18:20]))
	if key != "MPA ID Req Frame" && key != "MPA ID Rep Frame" {
		return len(b), fmt.Sprintf("not an MPA frame: key %q", key), false
	}
	if pdLen > 512 {
		return len(b), fmt.Sprintf("%q with absurd PD_Length %d", key, pdLen), false
	}
	if len(b) < 20+pdLen {
		return 0, "", false
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "%q flags=%#02x(M=%d C=%d R=%d enh=%d x08=%d) rev=%d pd_len=%d",
		key, flags, flags>>7&1, flags>>6&1, flags>>5&1, flags>>4&1, flags>>3&1, rev, pdLen)
	pd := b[20 : 20+pdLen]
	if flags&0x10 != 0 && rev == 2 && pdLen >= 4 {
		ird, ord := binary.BigEndian.Uint16(pd[0:2]), binary.BigEndian.Uint16(pd[2:4])
		fmt.Fprintf(&sb, " ird=%d(A=%d B=%d) ord=%d(C=%d D=%d)",
			ird&0x3fff, ird>>15, ird>>14&1, ord&0x3fff, ord>>15, ord>>14&1)
		pd = pd[4:]
	}
	fmt.Fprintf(&sb, " ulp_private_data=%d bytes", len(pd))
	return 20 + pdLen, sb.String(), flags&0x20 == 0
}

var rdmapOps = [...]string{"Write", "ReadReq", "ReadResp", "Send", "SendInv", "SendSE", "SendSEInv", "Terminate"}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// decodeFPDU frames and describes one FPDU at the start of b (no markers).
// It returns its length on the wire (0 = incomplete, -1 = nonsense).
func decodeFPDU(b []byte) (int, string) {
	if len(b) < 2 {
		return 0, ""
	}
	ulpdu := int(binary.BigEndian.Uint16(b[0:2]))
	if ulpdu < 14 { // a tagged DDP header alone is 14 bytes
		return -1, ""
	}
	pad := (4 - (2+ulpdu)%4) % 4
	n := 2 + ulpdu + pad + 4
	if len(b) < n {
		return 0, ""
	}
	f := b[:n]
	ddp, rdmap := f[2], f[3]
	tagged, last := ddp&0x80 != 0, ddp&0x40 != 0
	op := int(rdmap & 0x0f)
	opName := fmt.Sprintf("op%d", op)
	if op < len(rdmapOps) {
		opName = rdmapOps[op]
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "len=%d ulpdu=%d %s T=%t L=%t ddp_ver=%d rdmap_ver=%d",
		n, ulpdu, opName, tagged, last, ddp&3, rdmap>>6)
	if ddp&0x3c != 0 || rdmap&0x30 != 0 {
		fmt.Fprintf(&sb, " RSVD-BITS(ddp=%#02x rdmap=%#02x)", ddp&0x3c, rdmap&0x30)
	}
	var payload []byte
	if tagged {
		stag := binary.BigEndian.Uint32(f[4:8])
		to := binary.BigEndian.Uint64(f[8:16])
		payload = f[16 : 2+ulpdu]
		fmt.Fprintf(&sb, " stag=%#x to=%#x payload=%d", stag, to, len(payload))
	} else {
		if ulpdu < 18 {
			fmt.Fprintf(&sb, " SHORT-UNTAGGED-HEADER")
		} else {
			inv := binary.BigEndian.Uint32(f[4:8])
			qn := binary.BigEndian.Uint32(f[8:12])
			msn := binary.BigEndian.Uint32(f[12:16])
			mo := binary.BigEndian.Uint32(f[16:20])
			payload = f[20 : 2+ulpdu]
			fmt.Fprintf(&sb, " inv_stag=%#x qn=%d msn=%d mo=%d payload=%d", inv, qn, msn, mo, len(payload))
			switch {
			case op == 1 && len(payload) >= 28:
				fmt.Fprintf(&sb, " [sink stag=%#x to=%#x size=%d src stag=%#x to=%#x]",
					binary.BigEndian.Uint32(payload[0:4]), binary.BigEndian.Uint64(payload[4:12]),
					binary.BigEndian.Uint32(payload[12:16]), binary.BigEndian.Uint32(payload[16:20]),
					binary.BigEndian.Uint64(payload[20:28]))
			case op == 7 && len(payload) >= 4:
				w := binary.BigEndian.Uint32(payload[0:4])
				fmt.Fprintf(&sb, " [terminate layer=%d etype=%d ecode=%#x M=%d D=%d R=%d]",
					w>>28, w>>24&0xf, w>>16&0xff, w>>15&1, w>>14&1, w>>13&1)
			case (op == 3 || op == 5) && len(payload) == infoLen:
				a, k, s := ParseInfo(payload)
				fmt.Fprintf(&sb, " [rping_rdma_info buf=%#x rkey=%#x size=%d]", a, k, s)
			}
		}
	}
	for _, x := range f[2+ulpdu : 2+ulpdu+pad] {
		if x != 0 {
			sb.WriteString(" NONZERO-PAD")
			break
		}
	}
	crcField := f[n-4:]
	if le := binary.LittleEndian.Uint32(crcField); le != 0 {
		sum := crc32.Checksum(f[:n-4], castagnoli)
		switch {
		case sum == le:
			sb.WriteString(" crc=ok(le)")
		case sum == binary.BigEndian.Uint32(crcField):
			sb.WriteString(" crc=ok(BIG-endian)")
		default:
			fmt.Fprintf(&sb, " crc=BAD(field %x, computed %08x)", crcField, sum)
		}
	} else {
		sb.WriteString(" crc=0")
	}
	return n, sb.String()
}
