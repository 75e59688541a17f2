package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/urfave/cli/v2"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	app := newApp()
	if err := checkCommand(app, os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "rdisk:", err)
		os.Exit(2)
	}
	if err := app.RunContext(ctx, interspersed(app, os.Args)); err != nil {
		fmt.Fprintln(os.Stderr, "rdisk:", err)
		os.Exit(1)
	}
}

// version is the module version of the build, or its VCS revision.
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := bi.Main.Version
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	if (v == "" || v == "(devel)") && rev != "" {
		return "devel-" + rev[:min(12, len(rev))] + dirty
	}
	if v == "" {
		return "(devel)"
	}
	return v
}

// checkCommand refuses an unknown command name in one line, naming the
// commands, instead of urfave/cli's "No help topic".
func checkCommand(app *cli.App, args []string) error {
	for i := 1; i < len(args); i++ {
		a := args[i]
		if strings.HasPrefix(a, "-") {
			if takesValue(app.Flags, a) && !strings.Contains(a, "=") {
				i++
			}
			continue
		}
		if a == "help" || a == "h" {
			return nil
		}
		var names []string
		for _, c := range app.Commands {
			if c.HasName(a) {
				return nil
			}
			names = append(names, c.Name)
		}
		return fmt.Errorf("unknown command %q; the commands are %s (rdisk --help)", a, strings.Join(names, ", "))
	}
	return nil
}

// usageErrors makes a flag or argument mistake one line naming the
// command's help, instead of a full help dump, in every command.
func usageErrors(cmds []*cli.Command, path string) {
	for _, c := range cmds {
		p := path + " " + c.Name
		c.OnUsageError = func(_ *cli.Context, err error, _ bool) error {
			return fmt.Errorf("%s: %w (rdisk%s --help)", strings.TrimSpace(p), err, p)
		}
		usageErrors(c.Subcommands, p)
	}
}

func newApp() *cli.App {
	app := &cli.App{
		Name:    "rdisk",
		Version: version(),
		// Our own --version flag: urfave/cli's is a package variable that
		// every App writes while parsing (a data race between Apps).
		HideVersion: true,
		Action: func(c *cli.Context) error {
			if c.Bool("version") {
				fmt.Fprintf(c.App.Writer, "rdisk version %s\n", c.App.Version)
				return nil
			}
			return cli.ShowAppHelp(c)
		},
		Usage: "block storage over RDMA and TCP: NVMe-oF, SRP and iSER/iSCSI targets and initiators",
		OnUsageError: func(_ *cli.Context, err error, _ bool) error {
			return fmt.Errorf("%w (rdisk --help)", err)
		},
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "log-level", Value: "info", Usage: "debug, info, warn or error"},
			&cli.StringFlag{Name: "log-format", Value: "text", Usage: "text or json (one JSON object per line, log/slog's keys)"},
			&cli.BoolFlag{Name: "version", Aliases: []string{"v"}, Usage: "print the version"},
			rdmaFlag(),
		},
		Commands: []*cli.Command{
			targetCommand(),
			rdmaPerfCommand(),
			rdmaCommand(),
			discoverCommand(),
			nvmeCommand(),
			benchCommand(),
			connectCommand(),
			listCommand(),
			disconnectCommand(),
			cpCommand(),
			daemonCommand(),
			adminCommand(),
		},
	}
	usageErrors(app.Commands, "")
	return app
}

// logger builds the process logger from the global flags.
func logger(c *cli.Context) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(c.String("log-level"))); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", c.String("log-level"))
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch f := c.String("log-format"); f {
	case "text", "": // "": a command run without the app's flags (tests)
		return slog.New(slog.NewTextHandler(os.Stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, opts)), nil
	default:
		return nil, fmt.Errorf("--log-format %q: want text or json", f)
	}
}
