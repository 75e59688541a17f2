package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/rdisk/rdisk/blockdev"
	"github.com/rdisk/rdisk/initiator"
	"github.com/rdisk/rdisk/initiator/nbd"
	"github.com/rdisk/rdisk/nvmeof/host"
	"github.com/urfave/cli/v2"
)

// defaultControlSocket is where the initiator daemon listens.
const defaultControlSocket = "/run/rdisk/initiator.sock"

// dialerFactory builds the protocol dialers for a daemon (and rdisk cp);
// the returned func releases what they share.
type dialerFactory func(c *cli.Context, log *slog.Logger) (initiator.Dialers, func(), error)

func controlFlag() cli.Flag {
	return &cli.StringFlag{Name: "control", Value: defaultControlSocket, Usage: "control socket of the initiator daemon"}
}

// sessionFlags are the reconnect knobs of connect and daemon.
func sessionFlags() []cli.Flag {
	return []cli.Flag{
		&cli.DurationFlag{Name: "loss-timeout", Value: initiator.DefaultLossTimeout, Usage: "how long I/O waits for a lost connection to come back before failing with EIO (like nvme-cli ctrl_loss_tmo; negative: forever)"},
		&cli.DurationFlag{Name: "reconnect-delay", Value: initiator.DefaultReconnectDelay, Usage: "pause between reconnection attempts"},
		cpusFlag("most CPUs (Go Ps) the initiator daemon uses; it uses one per NBD client connection up to this", "$GOMAXPROCS, else all CPUs"),
		sysmonFlag(),
	}
}

func daemonCommand() *cli.Command { return daemonCommandWith(protocolDialers) }

func daemonCommandWith(mk dialerFactory) *cli.Command {
	return &cli.Command{
		Name:  "daemon",
		Usage: "run the initiator daemon in the foreground (rdisk connect starts it when needed)",
		Description: `The daemon holds the sessions to remote disks and their local exports
(NBD sockets, FUSE files). rdisk connect, list and disconnect talk to it over
its control socket, which only root (or the daemon's user) may use.`,
		Flags: append(append([]cli.Flag{
			controlFlag(),
			&cli.BoolFlag{Name: "exit-when-idle", Usage: "exit when the last session is disconnected"},
			drainFlag("on SIGTERM/SIGINT, how long to wait for each session's in-flight I/O, flush and disconnect"),
			metricsFlag(),
		}, sessionFlags()...), append(append(append(hostIDFlags(), iscsiFlags()...), digestFlags()...), dhchapFlags()...)...),
		Action: func(c *cli.Context) error { return runDaemon(c, mk, nil) },
	}
}

// runDaemon serves the control socket until interrupted (or idle, with
// --exit-when-idle). first, if set, is connected before the socket opens
// (rdisk connect --foreground).
func runDaemon(c *cli.Context, mk dialerFactory, first *initiator.ConnectSpec) error {
	log, err := logger(c)
	if err != nil {
		return err
	}
	dialers, release, err := mk(c, log)
	if err != nil {
		return err
	}
	defer release()
	// One P per NBD client connection (procs.go says why).
	var nbdCfg nbd.Config
	if nbdCfg.ConnHook, err = procHook(c, log); err != nil {
		return err
	}
	path := c.String("control")
	d := initiator.NewDaemon(initiator.DaemonConfig{
		Dialers: dialers, LossTimeout: c.Duration("loss-timeout"), ReconnectDelay: c.Duration("reconnect-delay"),
		DefaultNBDDir: filepath.Dir(path), Logger: log, NBD: nbdCfg,
	})
	defer d.Close()
	metricsLn, err := listenMetrics(c)
	if err != nil {
		return err
	}
	if metricsLn != nil {
		defer metricsLn.Close()
	}
	l, err := initiator.ListenControl(path)
	if err != nil {
		return err
	}
	defer os.Remove(path)
	if first != nil {
		si, err := d.Connect(c.Context, *first)
		if err != nil {
			l.Close()
			return err
		}
		printConnected(c, si)
	}
	ctx, cancel := context.WithCancel(c.Context)
	defer cancel()
	served := make(chan error, 1)
	go func() { served <- d.ServeControl(ctx, l) }()
	if metricsLn != nil {
		go serveMetrics(ctx, metricsLn, newRegistry(sessionCollector{d}), log)
	}
	log.Info("initiator daemon: listening", "control", path, "pid", os.Getpid())
	notifyReady(log, "serving "+path)
	for {
		select {
		case <-c.Context.Done():
			notifyStopping()
			log.Info("initiator daemon: stopping: in-flight I/O, flush and disconnect of every session", "timeout", c.Duration("drain-timeout"))
			dctx, dcancel := context.WithTimeout(context.Background(), c.Duration("drain-timeout"))
			err := d.Shutdown(dctx)
			dcancel()
			cancel()
			<-served
			if err != nil {
				return fmt.Errorf("stopping the initiator daemon: %w", err)
			}
			log.Info("initiator daemon: stopped cleanly")
			return nil
		case err := <-served:
			return err
		case <-d.Idle():
			if c.Bool("exit-when-idle") && !d.Busy() {
				log.Info("initiator daemon: no sessions left; exiting")
				cancel()
				<-served
				return nil
			}
		}
	}
}

// protocolDialers wires the protocols rdisk speaks: nvme:// and
// nvme+rdma:// through the NVMe-oF host over the software iWARP provider
// (one provider for all sessions), nvme+tcp:// through the NVMe-oF host
// over NVMe/TCP (with the --hdr-digest/--data-digest of the command; the
// --dhchap-secret/--dhchap-ctrl-secret for any NVMe-oF controller that asks
// for DH-HMAC-CHAP authentication),
// iser:// and iscsi:// through the iSCSI initiator, srp:// through the
// SRP initiator (these open their own provider per connection, as rdisk
// bench does). The daemon's own flags give the iSCSI initiator name and
// CHAP credentials.
func protocolDialers(c *cli.Context, log *slog.Logger) (initiator.Dialers, func(), error) {
	id, err := identityFromFlags(c)
	if err != nil {
		return nil, nil, err
	}
	choice, err := rdmaOf(c)
	if err != nil {
		return nil, nil, err
	}
	p, err := openRDMA(choice, log, "", false)
	if err != nil {
		return nil, nil, err
	}
	cfg := host.Config{HostNQN: id.NQN, HostID: id.ID, Logger: log, IOQueues: min(runtime.NumCPU(), 4)}
	if err := dhchapFromFlags(c, &cfg); err != nil {
		p.Close()
		return nil, nil, err
	}
	hdgst, ddgst := c.Bool("hdr-digest"), c.Bool("data-digest")
	nvme := func(ctx context.Context, url string) (blockdev.Device, error) {
		u, err := subsystemURL(url)
		if err != nil {
			return nil, err
		}
		cfg := cfg
		if u.Transport == host.TransportTCP {
			cfg.HeaderDigest, cfg.DataDigest = hdgst, ddgst
		}
		ns, err := host.Open(ctx, p, u, cfg)
		if err != nil {
			return nil, err
		}
		return nvmeDevice{ns}, nil
	}
	iscsiOpts, err := iscsiOptionsFromFlags(c)
	if err != nil {
		p.Close()
		return nil, nil, err
	}
	iscsiOpts.Logger = log
	iscsi := func(ctx context.Context, url string) (blockdev.Device, error) {
		return openISCSIDevice(ctx, url, iscsiOpts)
	}
	srpDial := func(ctx context.Context, url string) (blockdev.Device, error) {
		return openSRPDevice(ctx, url, srpOptions{Queues: cfg.IOQueues, Depth: 128, Logger: log, RDMA: choice})
	}
	return initiator.Dialers{"nvme": nvme, "nvme+rdma": nvme, "nvme+tcp": nvme, "iser": iscsi, "iscsi": iscsi, "srp": srpDial}, func() { p.Close() }, nil
}

// nvmeDevice tells the session when the controller failed, so it
// reconnects before the next I/O.
type nvmeDevice struct{ *host.Namespace }

func (d nvmeDevice) Done() <-chan struct{} { return d.Controller().Done() }
func (d nvmeDevice) Err() error            { return d.Controller().Err() }

// callDaemon sends one request to the daemon. errNoDaemon means nothing
// listens on the socket.
func callDaemon(c *cli.Context, req *initiator.Request, timeout time.Duration) (*initiator.Response, error) {
	path := c.String("control")
	if _, err := os.Stat(path); err != nil {
		return nil, errNoDaemon
	}
	ctx, cancel := context.WithTimeout(c.Context, timeout)
	defer cancel()
	resp, err := initiator.Call(ctx, path, req)
	if err != nil && resp == nil {
		if errors.Is(err, os.ErrPermission) {
			return nil, fmt.Errorf("control socket %s: permission denied (the initiator daemon is root-only)", path)
		}
		if ctx.Err() == nil && c.Context.Err() == nil {
			return nil, errNoDaemon
		}
		return nil, fmt.Errorf("initiator daemon at %s: %w", path, err)
	}
	return resp, err
}

var errNoDaemon = errors.New("the initiator daemon is not running")
