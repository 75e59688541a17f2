package initiator

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/rdisk/rdisk/blockdev"
)

// Dialer opens a device from a URL of its protocol. The device must fail
// its requests with errors matching blockdev.ErrClosed when the connection
// is lost, so the session can reconnect.
type Dialer func(ctx context.Context, url string) (blockdev.Device, error)

// Dialers maps URL schemes ("nvme", "iser", "srp") to dialers. The command
// line wires the protocols in; tests bring fakes.
type Dialers map[string]Dialer

// Scheme returns the scheme of a URL ("nvme" of "nvme://host/nqn").
func Scheme(url string) (string, error) {
	i := strings.Index(url, "://")
	if i <= 0 {
		return "", fmt.Errorf("%q is not a URL (want SCHEME://HOST/..., e.g. nvme://127.0.0.1:4420/NQN)", url)
	}
	return strings.ToLower(url[:i]), nil
}

// Lookup returns the dialer for a URL's scheme.
func (d Dialers) Lookup(url string) (Dialer, string, error) {
	scheme, err := Scheme(url)
	if err != nil {
		return nil, "", err
	}
	dial := d[scheme]
	if dial == nil {
		return nil, scheme, fmt.Errorf("URL %q: unknown protocol %q (this build speaks %s)", url, scheme, d.names())
	}
	return dial, scheme, nil
}

// Dial opens a device from a URL with the dialer of its scheme.
func (d Dialers) Dial(ctx context.Context, url string) (blockdev.Device, error) {
	dial, _, err := d.Lookup(url)
	if err != nil {
		return nil, err
	}
	return dial(ctx, url)
}

func (d Dialers) names() string {
	var s []string
	for k := range d {
		s = append(s, k+"://")
	}
	sort.Strings(s)
	if len(s) == 0 {
		return "no protocol"
	}
	return strings.Join(s, ", ")
}

// IsURL tells whether s names a remote disk (SCHEME://...) rather than a
// local path.
func IsURL(s string) bool {
	i := strings.Index(s, "://")
	if i <= 0 {
		return false
	}
	for _, c := range s[:i] {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}
