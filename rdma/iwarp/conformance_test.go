package iwarp

import (
	"testing"

	"github.com/rdisk/rdisk/rdma"
	"github.com/rdisk/rdisk/rdma/rdmatest"
)

func newTestProvider(t *testing.T) rdma.Provider {
	p, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestConformance(t *testing.T) {
	t.Parallel()
	rdmatest.Run(t, newTestProvider)
}

func TestConformanceCRC(t *testing.T) {
	t.Parallel()
	rdmatest.Run(t, func(t *testing.T) rdma.Provider {
		p, err := New(Config{CRC: true, MaxFPDUPayload: 1448})
		if err != nil {
			t.Fatal(err)
		}
		return p
	})
}
