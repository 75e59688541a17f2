package host

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/rdisk/rdisk/nvmeof"
)

// DefaultPort is the NVMe-oF port (IANA 4420), used by the RDMA and TCP
// transports alike.
const DefaultPort = 4420

// URL names an NVMe-oF subsystem, and optionally one of its namespaces:
// nvme://HOST[:PORT]/SUBNQN[/NSID] (NVMe/RDMA; nvme+rdma:// is the same),
// or nvme+tcp://... (NVMe/TCP). HOST is a name, an IPv4 address or a
// bracketed IPv6 address (with an optional %zone, escaped as %25 or not).
type URL struct {
	// Transport is the transport binding the scheme names; the zero value
	// means TransportRDMA.
	Transport Transport
	// Host is the host name or address, without brackets.
	Host string
	// Port is the transport service ID; DefaultPort when the URL has none.
	Port int
	// SubNQN is the subsystem NQN; empty in a URL naming only a port (as
	// `rdisk discover` takes).
	SubNQN string
	// NSID is the namespace; 0 when the URL names none.
	NSID uint32
}

// Addr returns "host:port" for dialing.
func (u URL) Addr() string { return net.JoinHostPort(u.Host, strconv.Itoa(u.Port)) }

// Scheme returns the URL scheme of u's transport: "nvme" for RDMA (as
// rdisk has always written it), "nvme+tcp" for TCP.
func (u URL) Scheme() string {
	if u.Transport.orDefault() == TransportTCP {
		return "nvme+tcp"
	}
	return "nvme"
}

// String formats u back into URL form ('%' escaped as "%25" in an IPv6 zone
// and in the NQN, so that ParseURL reads back the same URL).
func (u URL) String() string {
	h := u.Host
	if strings.Contains(h, ":") {
		h = "[" + strings.ReplaceAll(h, "%", "%25") + "]"
	}
	s := u.Scheme() + "://" + h + ":" + strconv.Itoa(u.Port)
	if u.SubNQN != "" {
		s += "/" + strings.ReplaceAll(u.SubNQN, "%", "%25")
		if u.NSID != 0 {
			s += "/" + strconv.FormatUint(uint64(u.NSID), 10)
		}
	}
	return s
}

// Schemes lists the URL schemes ParseURL takes, for usage messages.
const Schemes = "nvme:// (RDMA), nvme+rdma://, nvme+tcp://"

// ParseURL parses an nvme://, nvme+rdma:// (both NVMe/RDMA) or nvme+tcp://
// URL; Transport is set from the scheme. The subsystem NQN and NSID are
// optional here; callers that need them check. An NQN may hold any
// printable ASCII but '/' (the spec allows a colon-rich, dotted grammar;
// rdisk does not enforce it), at most 223 bytes.
func ParseURL(s string) (URL, error) {
	var u URL
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		return u, fmt.Errorf("URL %q: want nvme://HOST[:PORT]/SUBNQN[/NSID] or nvme+tcp://...", s)
	}
	switch strings.ToLower(scheme) {
	case "nvme", "nvme+rdma":
		u.Transport = TransportRDMA
	case "nvme+tcp":
		u.Transport = TransportTCP
	default:
		return u, fmt.Errorf("URL %q: scheme %q is not nvme (want nvme://HOST[:PORT]/SUBNQN[/NSID], nvme+rdma:// or nvme+tcp://)", s, scheme)
	}
	hostport, path, _ := strings.Cut(rest, "/")
	if hostport == "" {
		return u, fmt.Errorf("URL %q: no host", s)
	}
	host, port, err := splitHostPort(hostport)
	if err != nil {
		return u, fmt.Errorf("URL %q: %w", s, err)
	}
	u.Host, u.Port = host, port
	path = strings.TrimSuffix(path, "/")
	if path == "" {
		return u, nil
	}
	nqn, nsid, hasNSID := strings.Cut(path, "/")
	if strings.Contains(nqn, "%") {
		// Allow percent-escaped NQNs (a URL written by a tool).
		dec, err := url.PathUnescape(nqn)
		if err != nil {
			return u, fmt.Errorf("URL %q: subsystem NQN: %w", s, err)
		}
		nqn = dec
	}
	if err := checkNQN(nqn); err != nil {
		return u, fmt.Errorf("URL %q: subsystem NQN: %w", s, err)
	}
	u.SubNQN = nqn
	if hasNSID {
		n, err := strconv.ParseUint(nsid, 10, 32)
		if err != nil || n == 0 || uint32(n) == nvmeof.NSIDAll {
			return u, fmt.Errorf("URL %q: namespace ID %q: want a number from 1 to %d", s, nsid, nvmeof.NSIDAll-1)
		}
		u.NSID = uint32(n)
	}
	return u, nil
}

func splitHostPort(hp string) (string, int, error) {
	host, portStr := hp, ""
	if strings.HasPrefix(hp, "[") {
		end := strings.Index(hp, "]")
		if end < 0 {
			return "", 0, fmt.Errorf("unterminated IPv6 address %q", hp)
		}
		host = hp[1:end]
		switch after := hp[end+1:]; {
		case after == "":
		case strings.HasPrefix(after, ":"):
			portStr = after[1:]
		default:
			return "", 0, fmt.Errorf("unexpected %q after the IPv6 address", after)
		}
		host = strings.Replace(host, "%25", "%", 1) // [fe80::1%25eth0] (RFC 6874)
		if ip := net.ParseIP(strings.SplitN(host, "%", 2)[0]); ip == nil {
			return "", 0, fmt.Errorf("%q is not an IPv6 address", host)
		}
	} else {
		if strings.Count(hp, ":") > 1 {
			return "", 0, fmt.Errorf("IPv6 address %q must be in brackets, as [%s]", hp, hp)
		}
		if h, p, ok := strings.Cut(hp, ":"); ok {
			host, portStr = h, p
		}
		if host == "" {
			return "", 0, fmt.Errorf("no host in %q", hp)
		}
		for _, r := range host {
			if !(r == '-' || r == '.' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
				return "", 0, fmt.Errorf("bad host name %q", host)
			}
		}
	}
	port := DefaultPort
	if portStr != "" {
		p, err := strconv.ParseUint(portStr, 10, 16)
		if err != nil || p == 0 {
			return "", 0, fmt.Errorf("port %q: want a number from 1 to 65535", portStr)
		}
		port = int(p)
	}
	return host, port, nil
}

// checkNQN checks what Connect data can carry: non-empty, at most
// MaxNQNLength bytes, printable ASCII without '/'.
func checkNQN(nqn string) error {
	if nqn == "" {
		return fmt.Errorf("empty")
	}
	if len(nqn) > nvmeof.MaxNQNLength {
		return fmt.Errorf("%d bytes, longer than %d", len(nqn), nvmeof.MaxNQNLength)
	}
	for i := 0; i < len(nqn); i++ {
		if c := nqn[i]; c <= ' ' || c > '~' || c == '/' {
			return fmt.Errorf("%q: byte %d (%q) is not allowed", nqn, i, c)
		}
	}
	return nil
}

// CheckNQN reports whether nqn can be sent as a host or subsystem NQN:
// non-empty, at most 223 bytes of printable ASCII without spaces or '/'.
func CheckNQN(nqn string) error {
	if err := checkNQN(nqn); err != nil {
		return fmt.Errorf("NQN %w", err)
	}
	return nil
}

// splitAddr splits "host:port" for URL building; a bad address yields it
// whole as the host.
func splitAddr(addr string) (string, int) {
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		return addr, DefaultPort
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		return addr, DefaultPort
	}
	return h, n
}
