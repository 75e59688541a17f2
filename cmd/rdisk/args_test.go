package main

import (
	"slices"
	"testing"
)

func TestInterspersed(t *testing.T) {
	t.Parallel()
	app := newApp()
	for _, tc := range []struct{ in, want []string }{
		{[]string{"rdisk", "rdma-perf", "client", "h:1", "--op", "read", "--json"}, []string{"rdisk", "rdma-perf", "client", "--op", "read", "--json", "h:1"}},
		{[]string{"rdisk", "--log-level", "debug", "rdma-perf", "client", "h:1", "--qd=4"}, []string{"rdisk", "--log-level", "debug", "rdma-perf", "client", "--qd=4", "h:1"}},
		{[]string{"rdisk", "rdma-perf", "server", "--listen", "a:1"}, []string{"rdisk", "rdma-perf", "server", "--listen", "a:1"}},
		{[]string{"rdisk", "nosuch", "x", "--y"}, []string{"rdisk", "nosuch", "x", "--y"}},
	} {
		if got := interspersed(app, tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("interspersed(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
