//go:build !verbs

package main

import (
	"errors"
	"log/slog"

	"github.com/rdisk/rdisk/rdma"
)

// verbsBuilt tells whether this binary has the verbs provider.
const verbsBuilt = false

var errNoVerbs = errors.New("this rdisk was built without the verbs provider: build it with -tags verbs (cgo, libibverbs-dev, librdmacm-dev)")

func openVerbs(*slog.Logger) (rdma.Provider, error) { return nil, errNoVerbs }

func verbsServesAddr(string) bool { return false }

func rdmaDevices() ([]rdmaDevice, error) { return nil, errNoVerbs }
