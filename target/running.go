package target

import (
	"context"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rdisk/rdisk/backstore"
	iscsitarget "github.com/rdisk/rdisk/iser/target"
	nvmet "github.com/rdisk/rdisk/nvmeof/target"
	"github.com/rdisk/rdisk/rdma"
	"github.com/rdisk/rdisk/scsi"
	"github.com/rdisk/rdisk/srp"
	srptarget "github.com/rdisk/rdisk/srp/target"
)

// nsKey names a namespace of the model.
type nsKey struct {
	nqn  string
	nsid uint32
}

// Running is a started configuration: the live target and the model it
// serves. Its methods (manage.go) change both together; they are safe for
// concurrent use.
type Running struct {
	T *nvmet.Target
	// Ports are the NVMe-oF ports Start opened (T.Ports lists the live
	// ones after changes).
	Ports []*nvmet.Port
	// ISCSI serves the rdisk_iscsi section (nil without one) on
	// ISCSIPortals; SRP the rdisk_srp section's SRPPorts on SRPAddrs.
	ISCSI        *iscsitarget.Target
	ISCSIPortals []net.Addr
	// ISERPortals are the RDMA/CM listeners beside ISCSIPortals when the
	// provider's connections are not TCP streams (rdma-core verbs); with
	// the software iWARP provider iSER shares the TCP portal instead.
	ISERPortals []net.Addr
	SRP         *srptarget.Target
	SRPPorts    []*srptarget.Port
	SRPAddrs    []net.Addr

	p rdma.Provider
	// openRDMA is Config.OpenRDMA; iscsiP and srpP serve the SCSI
	// sections' RDMA (their rdisk_rdma, else p).
	openRDMA     func(choice, addr string) (rdma.Provider, error)
	iscsiP, srpP rdma.Provider
	open         func(path string, o DeviceOptions) (backstore.Disk, error)
	log          *slog.Logger
	hook         func(int)
	ctx          context.Context
	cancel       context.CancelFunc

	// mu serialises changes; it guards the fields below.
	mu    sync.Mutex
	cfg   *Config // the model being served
	subs  map[string]*nvmet.Subsystem
	disks map[nsKey]backstore.Disk
	lus   map[nsKey]*scsi.LU
	// failing are the namespaces the health monitor holds failing, with
	// why (health.go); monitorDone is closed when the monitor ends (nil:
	// no monitor, rdisk_gateway.follow_health off).
	failing     map[nsKey]string
	monitorDone chan struct{}
}

// Disks returns the disks of the served namespaces, in configuration
// order. They stay owned by r (Close closes them).
func (r *Running) Disks() []backstore.Disk {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []backstore.Disk
	for _, s := range r.cfg.Subsystems {
		for _, ns := range s.Namespaces {
			if d := r.disks[nsKey{s.NQN, ns.NSID}]; d != nil {
				out = append(out, d)
			}
		}
	}
	return out
}

// Close stops the target and closes the disks.
func (r *Running) Close() error {
	if r.cancel != nil {
		r.cancel()
	}
	if r.monitorDone != nil {
		<-r.monitorDone
	}
	if r.ISCSI != nil {
		r.ISCSI.Close()
	}
	if r.SRP != nil {
		r.SRP.Close()
	}
	err := r.T.Close()
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, d := range r.disks {
		if cerr := d.Close(); cerr != nil && err == nil {
			err = cerr
		}
		delete(r.disks, k)
	}
	return err
}

// Start builds and starts a target from c: everything is opened and
// checked before the SCSI portals listen, and a failure closes what was
// started.
//
// hook, if not nil, is told of I/O queues connecting (+1) and ending (-1);
// see nvmeoftarget.Config.ConnHook.
func Start(c *Config, p rdma.Provider, log *slog.Logger, hook func(delta int)) (_ *Running, err error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	t, err := nvmet.New(nvmet.Config{Provider: p, Logger: log, ConnHook: hook})
	if err != nil {
		return nil, err
	}
	open := c.OpenDevice
	if open == nil {
		open = func(path string, o DeviceOptions) (backstore.Disk, error) {
			return openDevice(path, o, log)
		}
	}
	r := &Running{T: t, p: p, openRDMA: c.OpenRDMA, open: open, log: log, hook: hook, cfg: &Config{},
		subs: map[string]*nvmet.Subsystem{}, disks: map[nsKey]backstore.Disk{}, lus: map[nsKey]*scsi.LU{}, failing: map[nsKey]string{}}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	defer func() {
		if err != nil {
			r.Close()
		}
	}()
	if err := r.initSCSI(c); err != nil {
		return nil, err
	}
	r.mu.Lock()
	_, err = r.applyLocked(c, true)
	r.mu.Unlock()
	if err != nil {
		return nil, err
	}
	for _, pc := range r.cfg.Ports {
		if port := t.Port(pc.PortID); port != nil {
			r.Ports = append(r.Ports, port)
		}
	}
	if sc := r.cfg.SRP; sc != nil && r.SRP != nil {
		for _, pt := range sc.Ports {
			id, _ := srpPortID(pt)
			if port := r.SRP.Port(id); port != nil {
				r.SRPPorts = append(r.SRPPorts, port)
			}
		}
	}
	if err := r.listenSCSI(); err != nil {
		return nil, err
	}
	r.startMonitor()
	return r, nil
}

// ISCSIProvider is the RDMA provider serving iSER on the iSCSI portals
// (nil: none); SRPProvider the SRP listeners'.
func (r *Running) ISCSIProvider() rdma.Provider { return r.iscsiP }

// SRPProvider is the RDMA provider of the SRP listeners (nil: no SRP).
func (r *Running) SRPProvider() rdma.Provider { return r.srpP }

// provider returns the RDMA provider that an "rdisk_rdma" value names for
// the listening address addr (Config.OpenRDMA); what names the port or
// section for errors.
func (r *Running) provider(choice, addr, what string) (rdma.Provider, error) {
	if choice == "" {
		return r.p, nil
	}
	if r.openRDMA == nil {
		return nil, fmt.Errorf("%s: rdisk_rdma %q: this program opens no providers by name (Config.OpenRDMA)", what, choice)
	}
	p, err := r.openRDMA(choice, addr)
	if err != nil {
		return nil, fmt.Errorf("%s: rdisk_rdma %q: %w", what, choice, err)
	}
	return p, nil
}

// initSCSI makes the SCSI transports of c's sections, with no targets yet
// (applyLocked adds them) and not listening (listenSCSI).
func (r *Running) initSCSI(c *Config) error {
	if ic := c.ISCSI; ic != nil {
		secs := func(n int) time.Duration { return time.Duration(n) * time.Second }
		cfg := iscsitarget.Config{Logger: r.log, ConnHook: r.hook, PortalGroupTag: ic.TPGT,
			NopInInterval: secs(ic.NopInTimeout), NopInTimeout: secs(ic.NopInResponseTimeout), DataOutTimeout: secs(ic.DataOutTimeout)}
		var err error
		if r.iscsiP, err = r.provider(ic.RDMA, ic.Portals[0], "rdisk_iscsi"); err != nil {
			return err
		}
		if sp, ok := r.iscsiP.(rdma.StreamProvider); ok {
			cfg.Provider = sp
		}
		if cfg.DiscoveryCHAP, err = chapOf(ic.DiscoveryCHAP); err != nil {
			return fmt.Errorf("rdisk_iscsi: discovery_chap: %w", err)
		}
		if cfg.DiscoveryMutualCHAP, err = chapOf(ic.DiscoveryMutualCHAP); err != nil {
			return fmt.Errorf("rdisk_iscsi: discovery_mutual_chap: %w", err)
		}
		it, err := iscsitarget.New(cfg)
		if err != nil {
			return err
		}
		r.ISCSI = it
		r.cfg.ISCSI = &ISCSIConfig{Portals: slices.Clone(ic.Portals), TPGT: ic.TPGT,
			DiscoveryCHAP: ic.DiscoveryCHAP, DiscoveryMutualCHAP: ic.DiscoveryMutualCHAP,
			NopInTimeout: ic.NopInTimeout, NopInResponseTimeout: ic.NopInResponseTimeout, DataOutTimeout: ic.DataOutTimeout, RDMA: ic.RDMA}
	}
	if sc := c.SRP; sc != nil {
		var err error
		if r.srpP, err = r.provider(sc.RDMA, sc.Listen[0], "rdisk_srp"); err != nil {
			return err
		}
		if r.srpP == nil {
			return fmt.Errorf("rdisk_srp needs an RDMA provider")
		}
		st, err := srptarget.New(srptarget.Config{Logger: r.log, ConnHook: r.hook})
		if err != nil {
			return err
		}
		r.SRP = st
		r.cfg.SRP = &SRPConfig{Listen: slices.Clone(sc.Listen), RDMA: sc.RDMA}
	}
	return nil
}

// listenSCSI opens the iSCSI portals and SRP listeners.
func (r *Running) listenSCSI() error {
	if ic := r.cfg.ISCSI; ic != nil {
		for _, a := range ic.Portals {
			ln, err := net.Listen("tcp", a)
			if err != nil {
				return fmt.Errorf("iscsi portal %s: %w", a, err)
			}
			r.ISCSIPortals = append(r.ISCSIPortals, ln.Addr())
			go func() {
				if err := r.ISCSI.Serve(r.ctx, ln); err != nil {
					r.log.Error("iscsi portal", "addr", ln.Addr(), "err", err)
				}
			}()
			if p := r.iscsiP; p != nil {
				if _, stream := p.(rdma.StreamProvider); stream {
					continue
				}
				// iSER through the device's RDMA/CM, same port number.
				host, _, _ := net.SplitHostPort(a)
				_, port, _ := net.SplitHostPort(ln.Addr().String())
				rl, err := p.Listen(r.ctx, net.JoinHostPort(host, port))
				if err != nil {
					r.log.Warn("iscsi portal: iSER not served beside iSCSI/TCP", "addr", net.JoinHostPort(host, port), "provider", p.Name(), "err", err)
					continue
				}
				r.ISERPortals = append(r.ISERPortals, rl.Addr())
				go func() {
					if err := r.ISCSI.ServeRDMA(r.ctx, p, rl); err != nil {
						r.log.Error("iser portal", "addr", rl.Addr(), "err", err)
					}
				}()
			}
		}
	}
	if sc := r.cfg.SRP; sc != nil {
		for _, a := range sc.Listen {
			la, err := r.SRP.Listen(r.ctx, r.srpP, a)
			if err != nil {
				return err
			}
			r.SRPAddrs = append(r.SRPAddrs, la)
		}
	}
	return nil
}

// subsystemConfig is the nvmet form of a model subsystem.
func subsystemConfig(s *Subsystem) (nvmet.SubsystemConfig, error) {
	sc := nvmet.SubsystemConfig{NQN: s.NQN, AllowedHosts: s.AllowedHosts, Serial: s.Attr["serial"], Model: s.Attr["model"]}
	sc.AllowAnyHost = s.Attr["allow_any_host"] == "1"
	for _, a := range []struct {
		key string
		v   *uint16
	}{{"cntlid_min", &sc.CntlIDMin}, {"cntlid_max", &sc.CntlIDMax}} {
		if v, ok := s.Attr[a.key]; ok {
			n, err := strconv.ParseUint(v, 0, 16)
			if err != nil {
				return sc, fmt.Errorf("subsystem %s: %s %q: %w", s.NQN, a.key, v, err)
			}
			*a.v = uint16(n)
		}
	}
	return sc, nil
}

// openNamespace opens a model namespace's disk and makes its nvmet form.
func (r *Running) openNamespace(nqn string, ns *Namespace) (backstore.Disk, nvmet.NamespaceConfig, error) {
	nc, err := namespaceConfig(nqn, ns)
	if err != nil {
		return nil, nc, err
	}
	disk, err := r.open(ns.Device.Path, ns.deviceOptions())
	if err != nil {
		return nil, nc, fmt.Errorf("subsystem %s namespace %d: %w", nqn, ns.NSID, err)
	}
	nc.Disk = disk
	return disk, nc, nil
}

// namespaceConfig is the nvmet form of a model namespace, without its disk.
func namespaceConfig(nqn string, ns *Namespace) (nvmet.NamespaceConfig, error) {
	nc := nvmet.NamespaceConfig{NSID: ns.NSID, Disabled: ns.Enable == 0}
	grp, err := ns.anaGroupID()
	if err != nil {
		return nc, fmt.Errorf("subsystem %s namespace %d: %w", nqn, ns.NSID, err)
	}
	nc.ANAGroupID = grp
	for _, id := range []struct {
		name, v string
		dst     []byte
	}{{"NGUID", ns.Device.NGUID, nc.NGUID[:]}, {"UUID", ns.Device.UUID, nc.UUID[:]}, {"EUI-64", ns.Device.EUI64, nc.EUI64[:]}} {
		if id.v == "" {
			continue
		}
		b, err := hex.DecodeString(strings.ReplaceAll(id.v, "-", ""))
		if err != nil || len(b) != len(id.dst) {
			return nc, fmt.Errorf("subsystem %s namespace %d: %s %q is not %d hex bytes", nqn, ns.NSID, id.name, id.v, len(id.dst))
		}
		copy(id.dst, b)
	}
	return nc, nil
}

// portConfig is the nvmet form of a model port.
func portConfig(pc *Port) (nvmet.PortConfig, error) {
	var tr nvmet.Transport
	switch pc.Addr.TrType {
	case "", "rdma":
		tr = nvmet.TransportRDMA
	case "tcp":
		tr = nvmet.TransportTCP
	case "rdma+tcp", "tcp+rdma":
		tr = nvmet.TransportBoth
	default:
		return nvmet.PortConfig{}, fmt.Errorf("port %d: trtype %q: want rdma, tcp or rdma+tcp (both on one port number)", pc.PortID, pc.Addr.TrType)
	}
	svc := pc.Addr.TrSvcID
	if svc == "" {
		svc = "4420"
	}
	cfg := nvmet.PortConfig{ID: pc.PortID, Transport: tr, Addr: net.JoinHostPort(pc.Addr.TrAddr, svc)}
	if v, ok := pc.Param["inline_data_size"]; ok {
		n, err := strconv.Atoi(v)
		if err != nil {
			return cfg, fmt.Errorf("port %d: inline_data_size %q: %w", pc.PortID, v, err)
		}
		// nvmet's param_inline_data_size, for the port's transport.
		if tr != nvmet.TransportTCP {
			cfg.InlineDataSize = n
		}
		if tr != nvmet.TransportRDMA {
			cfg.TCPInlineDataSize = n
		}
	}
	if v, ok := pc.Param["max_queue_size"]; ok {
		n, err := strconv.Atoi(v)
		if err != nil {
			return cfg, fmt.Errorf("port %d: max_queue_size %q: %w", pc.PortID, v, err)
		}
		cfg.MaxQueueSize = n
	}
	states, err := pc.anaStates()
	if err != nil {
		return cfg, fmt.Errorf("port %d: %w", pc.PortID, err)
	}
	cfg.ANAGroups = states
	for _, rf := range pc.Referrals {
		svc := rf.Addr.TrSvcID
		if svc == "" {
			svc = "4420"
		}
		cfg.Referrals = append(cfg.Referrals, nvmet.Referral{PortID: rf.PortID, Addr: net.JoinHostPort(rf.Addr.TrAddr, svc)})
	}
	return cfg, nil
}

// srpPortID is a model SRP port's ID (validated by Parse).
func srpPortID(pt SRPPort) (srp.PortID, error) {
	ext, err := srp.ParseGUID(pt.IDExt)
	if err != nil {
		return srp.PortID{}, fmt.Errorf("id_ext: %w", err)
	}
	ioc, err := srp.ParseGUID(pt.IOCGUID)
	if err != nil {
		return srp.PortID{}, fmt.Errorf("ioc_guid: %w", err)
	}
	return srp.MakePortID(ext, ioc), nil
}
