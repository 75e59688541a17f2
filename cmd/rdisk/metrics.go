package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/urfave/cli/v2"

	"github.com/rdisk/rdisk/initiator"
)

// metricsFlag is --metrics-listen of the target and the initiator daemon.
func metricsFlag() cli.Flag {
	return &cli.StringFlag{Name: "metrics-listen", Usage: "serve Prometheus metrics on HOST:PORT at /metrics (empty: off; e.g. :9400)"}
}

// listenMetrics opens --metrics-listen (nil when it is empty), before
// anything serves: a busy address is an error then, not later.
func listenMetrics(c *cli.Context) (net.Listener, error) {
	addr := c.String("metrics-listen")
	if addr == "" {
		return nil, nil
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return nil, fmt.Errorf("--metrics-listen %q: want HOST:PORT or :PORT", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-listen: %w", err)
	}
	return ln, nil
}

// drainFlag is --drain-timeout.
func drainFlag(usage string) cli.Flag {
	return &cli.DurationFlag{Name: "drain-timeout", Value: 30 * time.Second, Usage: usage}
}

// sessionCollector exports the initiator daemon's sessions.
type sessionCollector struct{ d *initiator.Daemon }

var (
	descSessConnected  = prometheus.NewDesc("rdisk_initiator_session_connected", "1 when the session's connection is up.", []string{"session", "url"}, nil)
	descSessReconnects = prometheus.NewDesc("rdisk_initiator_session_reconnects_total", "Reconnections after a lost connection.", []string{"session"}, nil)
	descSessWaiting    = prometheus.NewDesc("rdisk_initiator_session_waiting", "I/Os waiting for a lost connection to come back.", []string{"session"}, nil)
	descSessOps        = prometheus.NewDesc("rdisk_initiator_session_ops_total", "Requests completed, by operation.", []string{"session", "op"}, nil)
	descSessBytes      = prometheus.NewDesc("rdisk_initiator_session_bytes_total", "Bytes moved, by operation.", []string{"session", "op"}, nil)
	descSessErrors     = prometheus.NewDesc("rdisk_initiator_session_errors_total", "Requests that failed.", []string{"session"}, nil)
	descSessPaths      = prometheus.NewDesc("rdisk_initiator_session_paths", "Paths of the session (several for a multipath session).", []string{"session"}, nil)
	descSessUsable     = prometheus.NewDesc("rdisk_initiator_session_usable_paths", "Paths serving I/O now (live, in a usable ANA/ALUA state).", []string{"session"}, nil)
)

func (s sessionCollector) Describe(ch chan<- *prometheus.Desc) { prometheus.DescribeByCollect(s, ch) }

func (s sessionCollector) Collect(ch chan<- prometheus.Metric) {
	for _, st := range s.d.SessionStats() {
		up := 0.0
		if st.Connected {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(descSessConnected, prometheus.GaugeValue, up, st.Name, st.URL)
		ch <- prometheus.MustNewConstMetric(descSessReconnects, prometheus.CounterValue, float64(st.Reconnects), st.Name)
		ch <- prometheus.MustNewConstMetric(descSessWaiting, prometheus.GaugeValue, float64(st.Waiting), st.Name)
		for op, n := range map[string]uint64{"read": st.Reads, "write": st.Writes, "flush": st.Flushes} {
			ch <- prometheus.MustNewConstMetric(descSessOps, prometheus.CounterValue, float64(n), st.Name, op)
		}
		ch <- prometheus.MustNewConstMetric(descSessBytes, prometheus.CounterValue, float64(st.ReadBytes), st.Name, "read")
		ch <- prometheus.MustNewConstMetric(descSessBytes, prometheus.CounterValue, float64(st.WriteBytes), st.Name, "write")
		ch <- prometheus.MustNewConstMetric(descSessErrors, prometheus.CounterValue, float64(st.Errors), st.Name)
		ch <- prometheus.MustNewConstMetric(descSessPaths, prometheus.GaugeValue, float64(st.Paths), st.Name)
		ch <- prometheus.MustNewConstMetric(descSessUsable, prometheus.GaugeValue, float64(st.UsablePaths), st.Name)
	}
}

// newRegistry is a registry with the Go runtime and process collectors
// and cs.
func newRegistry(cs ...prometheus.Collector) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	for _, c := range cs {
		reg.MustRegister(c)
	}
	return reg
}

// serveMetrics serves reg on ln at /metrics until ctx ends.
func serveMetrics(ctx context.Context, ln net.Listener, reg *prometheus.Registry, log *slog.Logger) {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Error("metrics endpoint", "err", err)
	}
}
