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
