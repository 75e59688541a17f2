package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/urfave/cli/v2"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	app := newApp()
	if err := app.RunContext(ctx, interspersed(app, os.Args)); err != nil {
		fmt.Fprintln(os.Stderr, "rdisk:", err)
		os.Exit(1)
	}
}

func newApp() *cli.App {
	return &cli.App{
		Name:  "rdisk",
		Usage: "block storage over RDMA: NVMe-oF, SRP and iSER targets and initiators",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "log-level", Value: "info", Usage: "debug, info, warn or error"},
		},
		Commands: []*cli.Command{
			targetCommand(),
			rdmaPerfCommand(),
			discoverCommand(),
			nvmeCommand(),
			benchCommand(),
			connectCommand(),
			listCommand(),
			disconnectCommand(),
			cpCommand(),
			daemonCommand(),
		},
	}
}

// logger builds the process logger from the global flags.
func logger(c *cli.Context) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(c.String("log-level"))); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", c.String("log-level"))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl})), nil
}
