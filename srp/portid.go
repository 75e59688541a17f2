package srp

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net"
	"strconv"
	"strings"
)

// PortID is a 16-byte SRP port identifier. A target port identifier is
// id_ext followed by ioc_guid; an initiator port identifier is
// initiator_ext followed by a port GUID (Linux ib_srp: the interface ID of
// the port's GID, which siw derives from the netdev's MAC address).
type PortID [16]byte

// MakePortID builds a port identifier from its two big-endian halves
// (id_ext and ioc_guid for a target port, initiator_ext and the GUID for an
// initiator port).
func MakePortID(ext, guid uint64) PortID {
	var p PortID
	binary.BigEndian.PutUint64(p[0:8], ext)
	binary.BigEndian.PutUint64(p[8:16], guid)
	return p
}

// Ext returns the first half (id_ext, initiator_ext).
func (p PortID) Ext() uint64 { return binary.BigEndian.Uint64(p[0:8]) }

// GUID returns the second half (ioc_guid, port GUID).
func (p PortID) GUID() uint64 { return binary.BigEndian.Uint64(p[8:16]) }

// String formats the identifier as Linux srpt names sessions:
// "0x" and 32 hex digits.
func (p PortID) String() string { return "0x" + hex.EncodeToString(p[:]) }

// ParsePortID parses 32 hex digits, with an optional "0x" prefix; shorter
// strings are zero-extended on the left as Linux srpt_parse_i_port_id does.
func ParsePortID(s string) (PortID, error) {
	var p PortID
	h := strings.TrimPrefix(strings.TrimPrefix(s, "0x"), "0X")
	if len(h) == 0 || len(h) > 32 || len(h)%2 != 0 {
		return p, fmt.Errorf("srp: port ID %q: want up to 32 hex digits (an even number)", s)
	}
	b, err := hex.DecodeString(h)
	if err != nil {
		return p, fmt.Errorf("srp: port ID %q: %w", s, err)
	}
	copy(p[16-len(b):], b)
	return p, nil
}

// ParseGUID parses a 64-bit identifier (id_ext, ioc_guid, initiator_ext)
// written as up to 16 hex digits with an optional "0x" prefix, or as four
// colon-separated groups of up to four hex digits ("0002:c903:00ab:cdef",
// as sysfs prints GUIDs).
func ParseGUID(s string) (uint64, error) {
	t := strings.TrimPrefix(strings.TrimPrefix(s, "0x"), "0X")
	if strings.Contains(t, ":") {
		parts := strings.Split(t, ":")
		if len(parts) != 4 {
			return 0, fmt.Errorf("srp: GUID %q: want four colon-separated groups", s)
		}
		var v uint64
		for _, part := range parts {
			if part == "" || len(part) > 4 {
				return 0, fmt.Errorf("srp: GUID %q: bad group %q", s, part)
			}
			g, err := strconv.ParseUint(part, 16, 16)
			if err != nil {
				return 0, fmt.Errorf("srp: GUID %q: %w", s, err)
			}
			v = v<<16 | g
		}
		return v, nil
	}
	if t == "" || len(t) > 16 {
		return 0, fmt.Errorf("srp: GUID %q: want up to 16 hex digits", s)
	}
	v, err := strconv.ParseUint(t, 16, 64)
	if err != nil {
		return 0, fmt.Errorf("srp: GUID %q: not hex", s)
	}
	return v, nil
}

// FormatGUID formats a 64-bit identifier as 16 hex digits, as ib_srp's
// add_target takes it.
func FormatGUID(v uint64) string { return fmt.Sprintf("%016x", v) }

// DefaultPort is the TCP port of SRP over RDMA/CM that rdisk uses, as
// blktests and Linux srpt's rdma_cm_port examples do.
const DefaultPort = 5555

// Default target port identifier of rdisk's default SRP target: id_ext 1,
// ioc_guid "rdisk" in ASCII followed by 00 00 01.
const (
	DefaultIDExt   uint64 = 0x0000000000000001
	DefaultIOCGUID uint64 = 0x7264_6973_6b00_0001
)

// URL names an SRP target port, and optionally a LUN:
//
//	srp://HOST[:PORT][/ID_EXT/IOC_GUID[/LUN]]
//
// HOST is a name, an IPv4 address or a bracketed IPv6 address; PORT
// defaults to 5555. ID_EXT and IOC_GUID are the target port identifier
// halves as ib_srp's add_target takes them (up to 16 hex digits, optional
// 0x, or four colon-separated groups); both absent means rdisk's default
// target (DefaultIDExt, DefaultIOCGUID). LUN is a decimal LUN number.
type URL struct {
	Host    string
	Port    int
	IDExt   uint64
	IOCGUID uint64
	// LUN is the logical unit, valid when HasLUN is set.
	LUN    uint64
	HasLUN bool
}

// Addr returns "host:port" for dialing.
func (u URL) Addr() string { return net.JoinHostPort(u.Host, strconv.Itoa(u.Port)) }

// TargetPortID returns id_ext followed by ioc_guid.
func (u URL) TargetPortID() PortID { return MakePortID(u.IDExt, u.IOCGUID) }

// String formats the URL with both identifiers spelled out.
func (u URL) String() string {
	h := u.Host
	if strings.Contains(h, ":") {
		h = "[" + h + "]"
	}
	s := fmt.Sprintf("srp://%s:%d/%016x/%016x", h, u.Port, u.IDExt, u.IOCGUID)
	if u.HasLUN {
		s += "/" + strconv.FormatUint(u.LUN, 10)
	}
	return s
}

// AddTarget returns what to write to Linux ib_srp's
// /sys/class/infiniband_srp/srp-DEV-PORT/add_target to log in to the
// target port the URL names.
func (u URL) AddTarget() string {
	return fmt.Sprintf("id_ext=%016x,ioc_guid=%016x,dest=%s", u.IDExt, u.IOCGUID, u.Addr())
}

// ParseURL parses an srp:// URL.
func ParseURL(s string) (URL, error) {
	u := URL{Port: DefaultPort, IDExt: DefaultIDExt, IOCGUID: DefaultIOCGUID}
	const want = "want srp://HOST[:PORT][/ID_EXT/IOC_GUID[/LUN]]"
	rest, ok := strings.CutPrefix(s, "srp://")
	if !ok {
		return u, fmt.Errorf("URL %q: %s", s, want)
	}
	hostport, path, _ := strings.Cut(rest, "/")
	if hostport == "" {
		return u, fmt.Errorf("URL %q: no host (%s)", s, want)
	}
	if strings.HasPrefix(hostport, "[") {
		end := strings.Index(hostport, "]")
		if end < 0 {
			return u, fmt.Errorf("URL %q: unterminated IPv6 address", s)
		}
		u.Host = hostport[1:end]
		after := hostport[end+1:]
		if after != "" {
			p, ok := strings.CutPrefix(after, ":")
			if !ok {
				return u, fmt.Errorf("URL %q: unexpected %q after the IPv6 address", s, after)
			}
			if err := u.setPort(p); err != nil {
				return u, fmt.Errorf("URL %q: %w", s, err)
			}
		}
		if net.ParseIP(strings.SplitN(u.Host, "%", 2)[0]) == nil {
			return u, fmt.Errorf("URL %q: %q is not an IPv6 address", s, u.Host)
		}
	} else {
		h, p, hasPort := strings.Cut(hostport, ":")
		if strings.Contains(p, ":") {
			return u, fmt.Errorf("URL %q: IPv6 addresses go in brackets", s)
		}
		u.Host = h
		if hasPort {
			if err := u.setPort(p); err != nil {
				return u, fmt.Errorf("URL %q: %w", s, err)
			}
		}
		if u.Host == "" {
			return u, fmt.Errorf("URL %q: no host", s)
		}
	}
	path = strings.TrimSuffix(path, "/")
	if path == "" {
		return u, nil
	}
	parts := strings.Split(path, "/")
	if len(parts) < 2 || len(parts) > 3 {
		return u, fmt.Errorf("URL %q: %s", s, want)
	}
	var err error
	if u.IDExt, err = ParseGUID(parts[0]); err != nil {
		return u, fmt.Errorf("URL %q: ID_EXT: %w", s, err)
	}
	if u.IOCGUID, err = ParseGUID(parts[1]); err != nil {
		return u, fmt.Errorf("URL %q: IOC_GUID: %w", s, err)
	}
	if len(parts) == 3 {
		n, err := strconv.ParseUint(parts[2], 10, 64)
		if err != nil || n > 16383 {
			return u, fmt.Errorf("URL %q: LUN %q: want a number from 0 to 16383", s, parts[2])
		}
		u.LUN, u.HasLUN = n, true
	}
	return u, nil
}

func (u *URL) setPort(p string) error {
	n, err := strconv.ParseUint(p, 10, 16)
	if err != nil || n == 0 {
		return fmt.Errorf("port %q: want a number from 1 to 65535", p)
	}
	u.Port = int(n)
	return nil
}
