package main

import (
	"bytes"
	"context"
	"slices"
	"strings"
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
		// A global flag after the command moves before it.
		{[]string{"rdisk", "target", "--log-level", "debug", "--size", "1MiB"}, []string{"rdisk", "--log-level", "debug", "target", "--size", "1MiB"}},
		{[]string{"rdisk", "target", "--log-level=warn"}, []string{"rdisk", "--log-level=warn", "target"}},
	} {
		if got := interspersed(app, tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("interspersed(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestCommandAndUsageErrors: a mistyped command and a mistyped flag are
// one line each, naming what to read, with no help dump.
func TestCommandAndUsageErrors(t *testing.T) {
	t.Parallel()
	app := newApp()
	if err := checkCommand(app, []string{"rdisk", "--log-level", "debug", "targte"}); err == nil || !strings.Contains(err.Error(), `unknown command "targte"`) {
		t.Errorf("mistyped command: %v", err)
	}
	for _, ok := range [][]string{{"rdisk", "--log-level", "debug", "target"}, {"rdisk", "help", "target"}, {"rdisk"}, {"rdisk", "--version"}} {
		if err := checkCommand(app, ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	var out, errOut bytes.Buffer
	app.Writer, app.ErrWriter = &out, &errOut
	cliMu.Lock() // urfave/cli's global help and version flags (runCLI)
	err := app.RunContext(context.Background(), []string{"rdisk", "target", "--bogus"})
	cliMu.Unlock()
	if err == nil || !strings.Contains(err.Error(), "-bogus") || !strings.Contains(err.Error(), "(rdisk target --help)") {
		t.Errorf("mistyped flag: %v", err)
	}
	if out.Len()+errOut.Len() > 0 && strings.Contains(out.String()+errOut.String(), "USAGE") {
		t.Errorf("mistyped flag printed the help:\n%s%s", out.String(), errOut.String())
	}
	if v := app.Version; v == "" {
		t.Error("no --version")
	}
}
