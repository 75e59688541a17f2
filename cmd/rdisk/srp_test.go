package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/rdisk/rdisk/blockdev"
	"github.com/rdisk/rdisk/rdma/iwarp"
	"github.com/rdisk/rdisk/srp"
	"github.com/rdisk/rdisk/target"
	"github.com/urfave/cli/v2"
)

// srpTestApp runs fn inside a cli app that has the target's flags (the
// SRP ones among them) and --json, as `rdisk target` and `rdisk discover`
// have them.
func srpTestApp(t *testing.T, out *bytes.Buffer, args []string, fn func(c *cli.Context) error) {
	t.Helper()
	app := &cli.App{
		Name:   "rdisk",
		Writer: out,
		Flags:  []cli.Flag{&cli.StringFlag{Name: "log-level", Value: "error"}},
		Commands: []*cli.Command{{
			Name:   "t",
			Flags:  append(targetCommand().Flags, &cli.BoolFlag{Name: "json"}),
			Action: fn,
		}},
	}
	cliMu.Lock() // urfave/cli's global help flag (runCLI)
	defer cliMu.Unlock()
	if err := app.RunContext(context.Background(), append([]string{"rdisk", "t"}, args...)); err != nil {
		t.Fatal(err)
	}
}

// startSRPFromFlags starts what rdisk target starts from its flags (with
// the NVMe-oF port and iSCSI portal off) and returns the SRP port's URL.
func startSRPFromFlags(t *testing.T, c *cli.Context, p *iwarp.Provider) (*target.Running, srp.URL, error) {
	cfg, err := targetConfig(c)
	if err != nil {
		return nil, srp.URL{}, err
	}
	run, err := target.Start(cfg, p, nil, nil)
	if err != nil {
		return nil, srp.URL{}, err
	}
	return run, run.SRPPorts[0].URL(run.SRPAddrs[0].String()), nil
}

func TestSRPHooks(t *testing.T) {
	p, err := iwarp.New(iwarp.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var out bytes.Buffer
	off := []string{"--listen", "127.0.0.1:0", "--discovery-listen", "", "--iscsi-listen", ""}
	srpTestApp(t, &out, append(off, "--srp-listen", "127.0.0.1:0", "--size", "8MiB"), func(c *cli.Context) error {
		run, u, err := startSRPFromFlags(t, c, p)
		if err != nil {
			return err
		}
		defer run.Close()
		// bench's hook: a blockdev.Device.
		d, err := openSRPDevice(c.Context, u.String(), srpOptions{Queues: 2, Depth: 8})
		if err != nil {
			return err
		}
		in := d.Info()
		if in.Size != 8<<20 || in.Queues != 2 {
			t.Errorf("device info %+v", in)
		}
		buf, _ := d.AllocBuffer(4096)
		copy(buf.Bytes(), "srp hook")
		if err := blockdev.Do(d, &blockdev.Request{Op: blockdev.OpWrite, Length: 4096, Buf: buf}); err != nil {
			t.Errorf("write: %v", err)
		}
		buf.Release()
		d.Close()
		// discover's hook, text and JSON.
		if err := discoverSRP(c, u.String()); err != nil {
			return err
		}
		if !strings.Contains(out.String(), "RDISK") || !strings.Contains(out.String(), "add_target") {
			t.Errorf("discover output:\n%s", out.String())
		}
		return nil
	})
	// --srp-listen on a non-loopback address needs an ACL or --allow-any-host.
	srpTestApp(t, &out, append(off, "--srp-listen", "10.255.255.1:5555"), func(c *cli.Context) error {
		if _, err := targetConfig(c); err == nil || !strings.Contains(err.Error(), "--srp-allow") {
			t.Errorf("non-loopback without ACL: %v", err)
		}
		return nil
	})
}

func TestSRPDiscoverJSON(t *testing.T) {
	p, _ := iwarp.New(iwarp.Config{})
	defer p.Close()
	var out bytes.Buffer
	srpTestApp(t, &out, []string{"--listen", "127.0.0.1:0", "--discovery-listen", "", "--iscsi-listen", "", "--srp-listen", "127.0.0.1:0",
		"--size", "4MiB", "--block-size", "4096", "--json"}, func(c *cli.Context) error {
		run, u, err := startSRPFromFlags(t, c, p)
		if err != nil {
			return err
		}
		defer run.Close()
		out.Reset()
		return discoverSRP(c, u.String())
	})
	var got struct {
		LUNs []struct {
			LUN       uint64 `json:"lun"`
			BlockSize int    `json:"block_size"`
			Size      uint64 `json:"size_bytes"`
		} `json:"luns"`
		AddTarget string `json:"linux_add_target"`
	}
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("%v in %s", err, out.String())
	}
	if len(got.LUNs) != 1 || got.LUNs[0].BlockSize != 4096 || got.LUNs[0].Size != 4<<20 || !strings.HasPrefix(got.AddTarget, "id_ext=0000000000000001,ioc_guid=726469736b000001,dest=127.0.0.1:") {
		t.Errorf("JSON %+v", got)
	}
}
