package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/rdisk/rdisk/backstore"
	"github.com/rdisk/rdisk/blockdev"
	"github.com/rdisk/rdisk/rdma/iwarp"
	"github.com/rdisk/rdisk/scsi"
	"github.com/urfave/cli/v2"
)

// srpTestApp runs fn inside a cli app that has the target's SRP flags and
// --json, as `rdisk target` and `rdisk discover` will.
func srpTestApp(t *testing.T, out *bytes.Buffer, args []string, fn func(c *cli.Context) error) {
	t.Helper()
	app := &cli.App{
		Name:   "rdisk",
		Writer: out,
		Flags:  []cli.Flag{&cli.StringFlag{Name: "log-level", Value: "error"}},
		Commands: []*cli.Command{{
			Name:   "t",
			Flags:  append(srpTargetFlags(), &cli.BoolFlag{Name: "json"}, &cli.BoolFlag{Name: "allow-any-host"}),
			Action: fn,
		}},
	}
	if err := app.RunContext(context.Background(), append([]string{"rdisk", "t"}, args...)); err != nil {
		t.Fatal(err)
	}
}

func TestSRPHooks(t *testing.T) {
	p, err := iwarp.New(iwarp.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	disk, err := backstore.NewMem(8<<20, 512)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	srpTestApp(t, &out, []string{"--srp-listen", "127.0.0.1:0"}, func(c *cli.Context) error {
		lu, err := scsi.NewLU(disk, scsi.LUConfig{Name: "srp-test"})
		if err != nil {
			return err
		}
		st, u, err := startSRPTarget(c, p, lu, nil, nil)
		if err != nil {
			return err
		}
		defer st.Close()
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
	srpTestApp(t, &out, []string{"--srp-listen", "10.255.255.1:5555"}, func(c *cli.Context) error {
		lu, err := scsi.NewLU(disk, scsi.LUConfig{Name: "srp-test"})
		if err != nil {
			return err
		}
		if _, _, err := startSRPTarget(c, p, lu, nil, nil); err == nil || !strings.Contains(err.Error(), "--srp-allow") {
			t.Errorf("non-loopback without ACL: %v", err)
		}
		return nil
	})
}

func TestSRPDiscoverJSON(t *testing.T) {
	p, _ := iwarp.New(iwarp.Config{})
	defer p.Close()
	disk, _ := backstore.NewMem(4<<20, 4096)
	var out bytes.Buffer
	srpTestApp(t, &out, []string{"--srp-listen", "127.0.0.1:0", "--json"}, func(c *cli.Context) error {
		lu, err := scsi.NewLU(disk, scsi.LUConfig{Name: "srp-test"})
		if err != nil {
			return err
		}
		st, u, err := startSRPTarget(c, p, lu, nil, nil)
		if err != nil {
			return err
		}
		defer st.Close()
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
