package main

import (
	"slices"
	"strings"

	"github.com/urfave/cli/v2"
)

// interspersed reorders args so that flags written after positional
// arguments ("rdisk rdma-perf client ADDR --op read") reach urfave/cli,
// which stops parsing flags at the first positional argument.
func interspersed(app *cli.App, args []string) []string {
	if len(args) < 2 {
		return args
	}
	out := []string{args[0]}
	cmds := app.Commands
	i := 1
	// Walk global flags and the command path.
	var cmd *cli.Command
	for i < len(args) {
		a := args[i]
		if strings.HasPrefix(a, "-") {
			// A global flag, or a flag of the command before a
			// subcommand ("rdisk admin --socket S ns add").
			fs := app.Flags
			if cmd != nil {
				fs = append(slices.Clone(fs), cmd.Flags...)
			}
			out = append(out, a)
			if takesValue(fs, a) && !strings.Contains(a, "=") && i+1 < len(args) {
				out = append(out, args[i+1])
				i++
			}
			i++
			continue
		}
		var next *cli.Command
		for _, c := range cmds {
			if c.HasName(a) {
				next = c
			}
		}
		if next == nil {
			break
		}
		cmd = next
		out = append(out, a)
		cmds = next.Subcommands
		i++
		if len(cmds) == 0 {
			break
		}
	}
	if cmd == nil {
		return args
	}
	var globals, flags, pos []string
	for ; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			pos = append(pos, args[i+1:]...)
			break
		}
		if strings.HasPrefix(a, "-") && a != "-" {
			// A global flag written after the command ("rdisk target
			// --log-level debug") goes before it, where urfave/cli
			// looks for it.
			dst := &flags
			fs := cmd.Flags
			if !hasFlag(cmd.Flags, a) && hasFlag(app.Flags, a) {
				dst, fs = &globals, app.Flags
			}
			*dst = append(*dst, a)
			if takesValue(fs, a) && !strings.Contains(a, "=") && i+1 < len(args) {
				*dst = append(*dst, args[i+1])
				i++
			}
			continue
		}
		pos = append(pos, a)
	}
	if len(globals) > 0 {
		out = append(append([]string{out[0]}, globals...), out[1:]...)
	}
	out = append(out, flags...)
	return append(out, pos...)
}

// hasFlag tells whether flags define the flag written as arg.
func hasFlag(flags []cli.Flag, arg string) bool {
	name, _, _ := strings.Cut(strings.TrimLeft(arg, "-"), "=")
	for _, f := range flags {
		if slices.Contains(f.Names(), name) {
			return true
		}
	}
	return false
}

// takesValue tells whether the flag written as arg needs a value argument.
func takesValue(flags []cli.Flag, arg string) bool {
	name := strings.TrimLeft(arg, "-")
	for _, f := range flags {
		for _, n := range f.Names() {
			if n != name {
				continue
			}
			if _, ok := f.(*cli.BoolFlag); ok {
				return false
			}
			return true
		}
	}
	return false
}
