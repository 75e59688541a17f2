//go:build !(ceph && linux)

package rbd

import (
	"errors"
	"strings"
	"testing"
)

// TestOpenNotBuilt: without the ceph tag Open says how to get a build
// with Ceph, after validating the config.
func TestOpenNotBuilt(t *testing.T) {
	t.Parallel()
	if Built() {
		t.Fatal("Built() in a build without ceph")
	}
	_, err := Open(Config{Pool: "rbd", Image: "x"}, nil)
	if !errors.Is(err, ErrNotBuilt) || !strings.Contains(err.Error(), "go build -tags ceph,pacific ./cmd/rdisk") || !strings.Contains(err.Error(), "rbd/x") {
		t.Errorf("Open: %v", err)
	}
	if _, err := Open(Config{Pool: "rbd"}, nil); err == nil || errors.Is(err, ErrNotBuilt) {
		t.Errorf("Open of an invalid config: %v; want the validation error", err)
	}
}
