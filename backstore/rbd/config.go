package rbd

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// LockMode says how an rdisk gateway uses the image's exclusive lock; see
// the package documentation for why the default is LockShared.
type LockMode string

// Lock modes.
const (
	// LockShared (the default, also written ""): the image must not have
	// the exclusive-lock feature; several gateways write to it at once
	// without any lock, as a multipath SAN disk is written. Open refuses
	// an image with exclusive-lock and says how to disable the feature.
	LockShared LockMode = "shared"
	// LockExclusive: Open takes the exclusive lock explicitly
	// (rbd_lock_acquire, RBD_LOCK_MODE_EXCLUSIVE: librbd then never hands
	// it over on request), breaking the lock of another owner first,
	// which blocklists that owner (its I/O fails with ErrFenced). For
	// active/passive serving where the gateway that opens last wins.
	LockExclusive LockMode = "exclusive"
	// LockAuto: librbd's own cooperative transitions: a client that
	// writes asks the owner for the lock. Correct, but with two writing
	// gateways the lock moves on every alternating write (slow).
	LockAuto LockMode = "auto"
)

// Defaults.
const (
	// DefaultOpTimeout is the default of Config.OpTimeout.
	DefaultOpTimeout = 30 * time.Second
	// DefaultMaxInFlight is the default of Config.MaxInFlight.
	DefaultMaxInFlight = 4096
	// DefaultID is the default cephx user.
	DefaultID = "admin"
)

// Config describes an RBD image to open: what a configuration file holds.
// JSON field names are snake_case; op_timeout is a duration string
// ("30s"); unknown fields are refused.
type Config struct {
	// Pool, Namespace (optional) and Image name the image.
	Pool      string `json:"pool"`
	Namespace string `json:"namespace,omitempty"`
	Image     string `json:"image"`
	// ID is the cephx user without "client."; "" means "admin".
	ID string `json:"id,omitempty"`
	// Keyring is the path of the user's keyring (default: Ceph's search
	// path from the conf).
	Keyring string `json:"keyring,omitempty"`
	// ConfFile is ceph.conf's path; "" means Ceph's default search
	// ($CEPH_CONF, /etc/ceph/ceph.conf, ~/.ceph/config, ./ceph.conf).
	ConfFile string `json:"conf_file,omitempty"`
	// MonHost overrides the monitors ("10.0.0.1,10.0.0.2:6789" or the
	// [v2:...,v1:...] forms ceph.conf accepts).
	MonHost string `json:"mon_host,omitempty"`
	// BlockSize is the logical block size exported: 512 (0) or 4096.
	BlockSize int `json:"block_size,omitempty"`
	// ReadOnly opens the image read-only (rbd_open_read_only).
	ReadOnly bool `json:"read_only,omitempty"`
	// OpTimeout bounds every OSD and monitor operation
	// (rados_osd_op_timeout, rados_mon_op_timeout); past it an I/O fails
	// with backstore.ErrTimeout. 0 means DefaultOpTimeout.
	OpTimeout time.Duration `json:"op_timeout,omitempty"`
	// Lock is the exclusive-lock mode; "" means LockShared.
	Lock LockMode `json:"lock,omitempty"`
	// MaxInFlight bounds the I/Os in flight on the image (completion
	// slots); Start waits for a slot beyond it. 0 means
	// DefaultMaxInFlight.
	MaxInFlight int `json:"max_in_flight,omitempty"`
}

// Name returns "POOL/IMAGE" or "POOL/NAMESPACE/IMAGE", the name used in
// errors and logs.
func (c Config) Name() string {
	if c.Namespace != "" {
		return c.Pool + "/" + c.Namespace + "/" + c.Image
	}
	return c.Pool + "/" + c.Image
}

// String returns the configuration as an rbd: URI (ParseURI reads it
// back).
func (c Config) String() string {
	var b strings.Builder
	b.WriteString("rbd:")
	esc := func(s string) string { return strings.ReplaceAll(url.PathEscape(s), "%40", "@") }
	b.WriteString(esc(c.Pool))
	if c.Namespace != "" {
		b.WriteString("/" + esc(c.Namespace))
	}
	b.WriteString("/" + esc(c.Image))
	q := url.Values{}
	set := func(k, v string) {
		if v != "" {
			q.Set(k, v)
		}
	}
	set("conf", c.ConfFile)
	set("id", c.ID)
	set("keyring", c.Keyring)
	set("mon_host", c.MonHost)
	if c.BlockSize != 0 {
		q.Set("block_size", strconv.Itoa(c.BlockSize))
	}
	if c.ReadOnly {
		q.Set("read_only", "true")
	}
	if c.OpTimeout != 0 {
		q.Set("op_timeout", c.OpTimeout.String())
	}
	set("lock", string(c.Lock))
	if c.MaxInFlight != 0 {
		q.Set("max_in_flight", strconv.Itoa(c.MaxInFlight))
	}
	if len(q) > 0 {
		b.WriteString("?" + q.Encode())
	}
	return b.String()
}

// uriKeys lists the query keys ParseURI takes, for its errors.
const uriKeys = "conf, id, keyring, mon_host, block_size, read_only, op_timeout, lock, max_in_flight"

// ParseURI parses "rbd:POOL/IMAGE" or "rbd:POOL/NAMESPACE/IMAGE", with an
// optional query: conf, id, keyring, mon_host, block_size, read_only,
// op_timeout (a duration: "30s"), lock (shared, exclusive or auto) and
// max_in_flight. Path parts may be percent-encoded. The result is
// validated (Validate).
func ParseURI(s string) (Config, error) {
	var c Config
	rest, ok := strings.CutPrefix(s, "rbd:")
	if !ok {
		return c, fmt.Errorf("rbd URI %q: does not start with \"rbd:\"", s)
	}
	if strings.HasPrefix(rest, "//") {
		return c, fmt.Errorf("rbd URI %q: write rbd:POOL/IMAGE, without \"//\"", s)
	}
	path, query, hasQuery := strings.Cut(rest, "?")
	if i := strings.IndexByte(path, '#'); i >= 0 {
		return c, fmt.Errorf("rbd URI %q: a fragment (#) is not allowed", s)
	}
	parts := strings.Split(path, "/")
	if len(parts) < 2 || len(parts) > 3 {
		return c, fmt.Errorf("rbd URI %q: the path %q has %d parts; want POOL/IMAGE or POOL/NAMESPACE/IMAGE", s, path, len(parts))
	}
	names := [3]string{"pool", "namespace", "image"}
	if len(parts) == 2 {
		names = [3]string{"pool", "image"}
	}
	for i, p := range parts {
		v, err := url.PathUnescape(p)
		if err != nil {
			return c, fmt.Errorf("rbd URI %q: %s %q: bad percent-encoding", s, names[i], p)
		}
		if v == "" {
			return c, fmt.Errorf("rbd URI %q: the %s is empty", s, names[i])
		}
		parts[i] = v
	}
	c.Pool, c.Image = parts[0], parts[len(parts)-1]
	if len(parts) == 3 {
		c.Namespace = parts[1]
	}
	if hasQuery {
		if strings.Contains(query, ";") {
			return c, fmt.Errorf("rbd URI %q: separate query parameters with &, not ;", s)
		}
		q, err := url.ParseQuery(query)
		if err != nil {
			return c, fmt.Errorf("rbd URI %q: query: %w", s, err)
		}
		for _, k := range slices.Sorted(maps.Keys(q)) {
			vs := q[k]
			if !known(k) {
				return c, fmt.Errorf("rbd URI %q: unknown query parameter %q (known: %s)", s, k, uriKeys)
			}
			if len(vs) != 1 {
				return c, fmt.Errorf("rbd URI %q: query parameter %q given %d times", s, k, len(vs))
			}
			if err := c.setKey(k, vs[0]); err != nil {
				return c, fmt.Errorf("rbd URI %q: query parameter %s: %w", s, k, err)
			}
		}
	}
	if err := c.Validate(); err != nil {
		return c, fmt.Errorf("rbd URI %q: %w", s, err)
	}
	return c, nil
}

func known(k string) bool {
	switch k {
	case "conf", "id", "keyring", "mon_host", "block_size", "read_only", "op_timeout", "lock", "max_in_flight":
		return true
	}
	return false
}

func (c *Config) setKey(k, v string) error {
	switch k {
	case "conf":
		c.ConfFile = v
	case "id":
		c.ID = v
	case "keyring":
		c.Keyring = v
	case "mon_host":
		c.MonHost = v
	case "block_size":
		n, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("%q is not a number", v)
		}
		c.BlockSize = n
	case "read_only":
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("%q is not true or false", v)
		}
		c.ReadOnly = b
	case "op_timeout":
		d, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("%q is not a duration such as 30s", v)
		}
		c.OpTimeout = d
	case "lock":
		c.Lock = LockMode(v)
	case "max_in_flight":
		n, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("%q is not a number", v)
		}
		c.MaxInFlight = n
	}
	return nil
}

// Validate checks the configuration without contacting the cluster.
func (c Config) Validate() error {
	name := func(what, v string, slash bool) error {
		if v == "" {
			return fmt.Errorf("rbd: the %s name is empty", what)
		}
		if !utf8.ValidString(v) {
			return fmt.Errorf("rbd: the %s name %q is not valid UTF-8", what, v)
		}
		for _, r := range v {
			if r < 0x20 || r == 0x7f {
				return fmt.Errorf("rbd: the %s name %q holds a control character", what, v)
			}
		}
		if !slash && strings.ContainsRune(v, '/') {
			return fmt.Errorf("rbd: the %s name %q holds a '/'", what, v)
		}
		return nil
	}
	if err := name("pool", c.Pool, false); err != nil {
		return err
	}
	if c.Namespace != "" {
		if err := name("namespace", c.Namespace, false); err != nil {
			return err
		}
	}
	if err := name("image", c.Image, false); err != nil {
		return err
	}
	if strings.ContainsRune(c.Image, '@') {
		return fmt.Errorf("rbd: image %q: snapshots (IMAGE@SNAP) are not supported", c.Image)
	}
	if c.ID != "" {
		if strings.HasPrefix(c.ID, "client.") {
			return fmt.Errorf("rbd: id %q: give the cephx user without \"client.\" (%q)", c.ID, strings.TrimPrefix(c.ID, "client."))
		}
		if err := name("id", c.ID, false); err != nil {
			return err
		}
	}
	for _, f := range [...]struct{ what, v string }{{"keyring", c.Keyring}, {"conf_file", c.ConfFile}, {"mon_host", c.MonHost}} {
		if strings.ContainsAny(f.v, "\x00\n\r") {
			return fmt.Errorf("rbd: %s %q holds a NUL or newline", f.what, f.v)
		}
	}
	if c.BlockSize != 0 && c.BlockSize != 512 && c.BlockSize != 4096 {
		return fmt.Errorf("rbd: block_size %d is neither 512 nor 4096", c.BlockSize)
	}
	if c.OpTimeout != 0 && (c.OpTimeout < time.Second || c.OpTimeout > time.Hour) {
		return fmt.Errorf("rbd: op_timeout %v is outside 1s..1h (write a duration such as \"30s\")", c.OpTimeout)
	}
	switch c.Lock {
	case "", LockShared, LockExclusive, LockAuto:
	default:
		return fmt.Errorf("rbd: lock %q is none of shared, exclusive, auto", c.Lock)
	}
	if c.ReadOnly && c.Lock == LockExclusive {
		return errors.New("rbd: lock exclusive with read_only: a read-only client cannot hold the exclusive lock")
	}
	if c.MaxInFlight < 0 || c.MaxInFlight > 1<<16 {
		return fmt.Errorf("rbd: max_in_flight %d is outside 1..65536 (0 means %d)", c.MaxInFlight, DefaultMaxInFlight)
	}
	return nil
}

// withDefaults returns c with the defaults filled in.
func (c Config) withDefaults() Config {
	if c.ID == "" {
		c.ID = DefaultID
	}
	if c.BlockSize == 0 {
		c.BlockSize = 512
	}
	if c.OpTimeout == 0 {
		c.OpTimeout = DefaultOpTimeout
	}
	if c.Lock == "" {
		c.Lock = LockShared
	}
	if c.MaxInFlight == 0 {
		c.MaxInFlight = DefaultMaxInFlight
	}
	return c
}

// configJSON is Config's JSON form: op_timeout as a duration string.
type configJSON struct {
	Pool        string   `json:"pool"`
	Namespace   string   `json:"namespace,omitempty"`
	Image       string   `json:"image"`
	ID          string   `json:"id,omitempty"`
	Keyring     string   `json:"keyring,omitempty"`
	ConfFile    string   `json:"conf_file,omitempty"`
	MonHost     string   `json:"mon_host,omitempty"`
	BlockSize   int      `json:"block_size,omitempty"`
	ReadOnly    bool     `json:"read_only,omitempty"`
	OpTimeout   string   `json:"op_timeout,omitempty"`
	Lock        LockMode `json:"lock,omitempty"`
	MaxInFlight int      `json:"max_in_flight,omitempty"`
}

// MarshalJSON writes op_timeout as a duration string.
func (c Config) MarshalJSON() ([]byte, error) {
	j := configJSON{c.Pool, c.Namespace, c.Image, c.ID, c.Keyring, c.ConfFile, c.MonHost, c.BlockSize, c.ReadOnly, "", c.Lock, c.MaxInFlight}
	if c.OpTimeout != 0 {
		j.OpTimeout = c.OpTimeout.String()
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads the object strictly (unknown fields and trailing
// data are errors); op_timeout is a duration string ("30s"). It does not
// validate: call Validate.
func (c *Config) UnmarshalJSON(b []byte) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var j configJSON
	if err := dec.Decode(&j); err != nil {
		return fmt.Errorf("rbd config: %w", err)
	}
	if dec.More() {
		return errors.New("rbd config: data after the object")
	}
	var d time.Duration
	if j.OpTimeout != "" {
		var err error
		if d, err = time.ParseDuration(j.OpTimeout); err != nil {
			return fmt.Errorf("rbd config: op_timeout %q is not a duration such as \"30s\"", j.OpTimeout)
		}
	}
	*c = Config{j.Pool, j.Namespace, j.Image, j.ID, j.Keyring, j.ConfFile, j.MonHost, j.BlockSize, j.ReadOnly, d, j.Lock, j.MaxInFlight}
	return nil
}
