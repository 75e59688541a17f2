package main

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/rdisk/rdisk/initiator"
	"github.com/rdisk/rdisk/internal/units"
	"github.com/urfave/cli/v2"
)

func listCommand() *cli.Command {
	return &cli.Command{
		Name:  "list",
		Usage: "list the initiator's sessions: state, size, protocol, exports and counters",
		Flags: []cli.Flag{
			controlFlag(),
			&cli.BoolFlag{Name: "json", Usage: "print JSON"},
		},
		Action: runSessionList,
	}
}

func runSessionList(c *cli.Context) error {
	if c.NArg() != 0 {
		return fmt.Errorf("list takes no arguments")
	}
	var sessions []initiator.SessionInfo
	resp, err := callDaemon(c, &initiator.Request{Op: initiator.OpList}, 10*time.Second)
	switch {
	case errors.Is(err, errNoDaemon):
	case err != nil:
		return err
	default:
		sessions = resp.Sessions
	}
	w := c.App.Writer
	if c.Bool("json") {
		if sessions == nil {
			sessions = []initiator.SessionInfo{}
		}
		b, _ := json.MarshalIndent(sessions, "", "  ")
		fmt.Fprintln(w, string(b))
		return nil
	}
	if len(sessions) == 0 {
		fmt.Fprintln(w, "no sessions")
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSTATE\tPROTO\tSIZE\tREADS\tWRITES\tREAD\tWRITTEN\tFLUSHES\tERRORS\tRETRIES\tRECONNECTS\tEXPORTS\tURL")
	for _, s := range sessions {
		st := s.Stats
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\t%d\t%d\t%d\t%d\t%s\t%s\n", s.Name, s.State, s.Protocol, units.FormatSize(s.Size),
			st.Reads, st.Writes, units.FormatSize(int64(st.BytesRead)), units.FormatSize(int64(st.BytesWritten)), st.Flushes,
			st.Errors, st.Retries, st.Reconnects, strings.Join(s.Exports, ", "), sessionURL(s))
	}
	tw.Flush()
	for _, s := range sessions {
		if len(s.Paths) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s: %d paths (%s)\n", s.Name, len(s.Paths), s.Policy)
		pw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(pw, "  PATH\tSTATE\tCONNECTION\tACCESS\tIN FLIGHT\tCOMPLETED\tERRORS\tFAILOVERS\tRECONNECTS\tSINCE")
		for _, p := range s.Paths {
			fmt.Fprintf(pw, "  %s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%s\n", p.URL, p.State, cmp.Or(p.Connection, "-"), p.Access,
				p.InFlight, p.Completed, p.Errors, p.Failovers, p.Reconnects, p.Since.Format(time.TimeOnly))
		}
		pw.Flush()
		for _, p := range s.Paths {
			if p.LastError != "" && p.State != "live" {
				fmt.Fprintf(w, "  %s: %s\n", p.URL, p.LastError)
			}
		}
	}
	for _, s := range sessions {
		if s.State != initiator.StateLive.String() && s.LastError != "" {
			fmt.Fprintf(w, "%s: %s since %s: %s\n", s.Name, s.State, s.Since.Format(time.TimeOnly), s.LastError)
		}
	}
	return nil
}

// sessionURL is a session's URL, or its paths' for a multipath one.
func sessionURL(s initiator.SessionInfo) string {
	if len(s.URLs) > 0 {
		return strings.Join(s.URLs, " ")
	}
	return s.URL
}
