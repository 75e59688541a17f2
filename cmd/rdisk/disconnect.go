package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/rdisk/rdisk/initiator"
	"github.com/urfave/cli/v2"
)

func disconnectCommand() *cli.Command {
	return &cli.Command{
		Name:      "disconnect",
		Usage:     "stop a session's exports and close it",
		ArgsUsage: "NAME | --all",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "all", Usage: "disconnect every session"},
			&cli.BoolFlag{Name: "force", Usage: "detach a FUSE mount that is still in use (its users get EIO)"},
			controlFlag(),
		},
		Action: runDisconnect,
	}
}

func runDisconnect(c *cli.Context) error {
	all := c.Bool("all")
	if all == (c.NArg() == 1) || c.NArg() > 1 {
		return fmt.Errorf("disconnect takes a session NAME or --all (rdisk list shows the names)")
	}
	req := &initiator.Request{Op: initiator.OpDisconnect, All: all, Name: c.Args().First(), Force: c.Bool("force")}
	resp, err := callDaemon(c, req, 2*time.Minute)
	if errors.Is(err, errNoDaemon) {
		if all {
			return nil
		}
		return fmt.Errorf("no session %q: %w", req.Name, err)
	}
	if err != nil {
		return err
	}
	for _, s := range resp.Sessions {
		fmt.Fprintf(c.App.Writer, "disconnected %s (%s)\n", s.Name, s.URL)
	}
	return nil
}
