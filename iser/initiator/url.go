package initiator

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/rdisk/rdisk/iser"
	"github.com/rdisk/rdisk/scsi"
)

// URL names an iSCSI target and LUN, or only a portal:
// iscsi://HOST[:PORT][/IQN[/LUN]] (iSCSI over TCP) and
// iser://HOST[:PORT][/IQN[/LUN]] (iSER). HOST is a name, an IPv4 address or
// a bracketed IPv6 address. The LUN defaults to 0.
type URL struct {
	Transport iser.Transport
	Host      string
	Port      int
	Target    string
	LUN       uint64
	// HasLUN reports whether the URL named a LUN.
	HasLUN bool
}

// ParseURL parses an iscsi:// or iser:// URL.
func ParseURL(s string) (URL, error) {
	var u URL
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		return u, fmt.Errorf("URL %q: want iscsi://HOST[:PORT]/IQN/LUN or iser://...", s)
	}
	switch scheme {
	case "iscsi":
		u.Transport = iser.TransportTCP
	case "iser":
		u.Transport = iser.TransportISER
	default:
		return u, fmt.Errorf("URL %q: scheme %q, want iscsi or iser", s, scheme)
	}
	hostport, path, _ := strings.Cut(rest, "/")
	if strings.Contains(hostport, "@") {
		return u, fmt.Errorf("URL %q: credentials in the URL are not supported (use the CHAP options)", s)
	}
	if hostport == "" {
		return u, fmt.Errorf("URL %q: no host", s)
	}
	u.Port = DefaultPort
	host := hostport
	if h, p, err := net.SplitHostPort(hostport); err == nil {
		n, err := strconv.Atoi(p)
		if err != nil || n <= 0 || n > 65535 {
			return u, fmt.Errorf("URL %q: bad port %q", s, p)
		}
		host, u.Port = h, n
	} else if strings.HasPrefix(hostport, "[") && strings.HasSuffix(hostport, "]") {
		host = hostport[1 : len(hostport)-1]
	} else if strings.Count(hostport, ":") > 0 {
		return u, fmt.Errorf("URL %q: bad host %q (bracket IPv6 addresses)", s, hostport)
	}
	if h, err := url.PathUnescape(host); err == nil {
		host = h
	}
	if !validHost(host) {
		return u, fmt.Errorf("URL %q: bad host %q", s, host)
	}
	u.Host = host
	path = strings.TrimSuffix(path, "/")
	if path == "" {
		return u, nil
	}
	target, lun, hasLUN := strings.Cut(path, "/")
	t, err := url.PathUnescape(target)
	if err != nil || !validName(t) {
		return u, fmt.Errorf("URL %q: bad target name %q", s, target)
	}
	u.Target = t
	if hasLUN {
		n, err := strconv.ParseUint(lun, 10, 64)
		if err != nil || n > scsi.MaxLUN {
			return u, fmt.Errorf("URL %q: LUN %q is not a number from 0 to %d", s, lun, scsi.MaxLUN)
		}
		u.LUN, u.HasLUN = n, true
	}
	return u, nil
}

// validHost accepts a host name, an IPv4 address or an IPv6 address with
// an optional zone.
func validHost(h string) bool {
	if h == "" {
		return false
	}
	if strings.Contains(h, ":") {
		addr, _, _ := strings.Cut(h, "%")
		ip := net.ParseIP(addr)
		return ip != nil && ip.To4() == nil && !strings.ContainsAny(h, "[]/ ")
	}
	for _, r := range h {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}

// validName accepts an iSCSI name's characters (printable ASCII without
// spaces, '/', '%', '?' or '#').
func validName(n string) bool {
	if n == "" || len(n) > 223 {
		return false
	}
	for _, r := range n {
		if r <= ' ' || r > '~' || strings.ContainsRune("/%?#", r) {
			return false
		}
	}
	return true
}

// Scheme returns "iscsi" or "iser".
func (u URL) Scheme() string {
	if u.Transport == iser.TransportISER {
		return "iser"
	}
	return "iscsi"
}

// Addr returns "host:port" for dialing.
func (u URL) Addr() string { return net.JoinHostPort(u.Host, strconv.Itoa(u.Port)) }

// String formats the URL ('%' of an IPv6 zone escaped as "%25").
func (u URL) String() string {
	s := u.Scheme() + "://" + net.JoinHostPort(strings.ReplaceAll(u.Host, "%", "%25"), strconv.Itoa(u.Port))
	if u.Target != "" {
		s += "/" + u.Target + "/" + strconv.FormatUint(u.LUN, 10)
	}
	return s
}
