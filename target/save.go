package target

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// JSON returns the model as rdisk reads it back (--config): nvmetcli's
// keys and rdisk's extensions.
func (c *Config) JSON() ([]byte, error) {
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("writing the configuration: %w", err)
	}
	return append(b, '\n'), nil
}

// NvmetcliJSON returns the NVMe-oF part of the model as nvmetcli saves it
// (/etc/nvmet/config.json: keys sorted, two-space indent), for Linux's
// nvmet ("nvmetcli restore"). What nvmet cannot take is reported in
// warnings: the SCSI sections, rdisk's RAM and null disks, block size and
// read-only settings, disabled ports, and a port serving rdma+tcp, which
// is written as two ports (nvmet serves one transport per port).
func (c *Config) NvmetcliJSON() ([]byte, []string, error) {
	var warn []string
	if c.ISCSI != nil || c.SRP != nil {
		warn = append(warn, "the rdisk_iscsi and rdisk_srp sections are left out (nvmet is NVMe-oF only; targetcli configures LIO's iSCSI and SRP)")
	}
	hosts := []any{}
	for _, h := range c.Hosts {
		m := map[string]any{"nqn": h.NQN}
		g := map[string]any{}
		key, ckey, hash, group := h.Key, h.CtrlKey, h.Hash, h.DHGroup
		if d := h.DHCHAP; d != nil {
			key, ckey, hash, group = cmp.Or(key, d.Key), cmp.Or(ckey, d.CtrlKey), cmp.Or(hash, d.Hash), cmp.Or(group, d.DHGroup)
		}
		for k, v := range map[string]string{"key": key, "ctrl_key": ckey, "hash": hash, "dhgroup": group} {
			if v != "" {
				g[k] = v
				if strings.HasPrefix(v, "@") {
					warn = append(warn, fmt.Sprintf("host %s: dhchap %s is read from the file %s by rdisk; nvmet needs the key itself", h.NQN, k, v[1:]))
				}
			}
		}
		if len(g) > 0 {
			m["dhchap"] = g
		}
		hosts = append(hosts, m)
	}
	ports := []any{}
	used := map[uint16]bool{}
	for _, p := range c.Ports {
		used[p.PortID] = true
	}
	freeID := func() uint16 {
		for id := uint16(1); ; id++ {
			if !used[id] {
				used[id] = true
				return id
			}
		}
	}
	for _, p := range c.Ports {
		if p.Disabled {
			warn = append(warn, fmt.Sprintf("port %d is disabled: left out", p.PortID))
			continue
		}
		trs := []string{cmp.Or(p.Addr.TrType, "rdma")}
		if trs[0] == "rdma+tcp" || trs[0] == "tcp+rdma" {
			trs = []string{"rdma", "tcp"}
		}
		for i, tr := range trs {
			id := p.PortID
			if i > 0 {
				id = freeID()
				warn = append(warn, fmt.Sprintf("port %d serves rdma+tcp: written as port %d (rdma) and port %d (tcp) on the same address", p.PortID, p.PortID, id))
			}
			fam := p.Addr.AdrFam
			if fam == "" {
				fam = "ipv4"
				if strings.Contains(p.Addr.TrAddr, ":") {
					fam = "ipv6"
				}
			}
			addr := map[string]any{"adrfam": fam, "traddr": p.Addr.TrAddr, "trsvcid": cmp.Or(p.Addr.TrSvcID, "4420"),
				"trtype": tr, "treq": cmp.Or(p.Addr.TReq, "not specified")}
			param := map[string]any{}
			for k, v := range p.Param {
				param[k] = v
			}
			referrals := []any{}
			for _, r := range p.Referrals {
				referrals = append(referrals, r)
			}
			m := map[string]any{"addr": addr, "param": param, "portid": id, "referrals": referrals,
				"subsystems": append([]string{}, p.Subsystems...)}
			if len(p.ANAGroups) > 0 {
				m["ana_groups"] = p.ANAGroups
			}
			ports = append(ports, m)
		}
	}
	subs := []any{}
	for _, s := range c.Subsystems {
		attr := map[string]any{"allow_any_host": "0"}
		for k, v := range s.Attr {
			attr[k] = v
		}
		nss := []any{}
		for _, ns := range s.Namespaces {
			dev := map[string]any{"path": ns.Device.Path}
			for k, v := range map[string]string{"nguid": ns.Device.NGUID, "uuid": ns.Device.UUID, "eui64": ns.Device.EUI64} {
				if v != "" {
					dev[k] = v
				}
			}
			if ok, _, kind := memDevice(ns.Device.Path); ok {
				warn = append(warn, fmt.Sprintf("subsystem %s namespace %d: %q is an rdisk %s disk; nvmet needs a file or block device path", s.NQN, ns.NSID, ns.Device.Path, kind))
			}
			if ns.BlockSize != 0 {
				warn = append(warn, fmt.Sprintf("subsystem %s namespace %d: rdisk_block_size %d is left out (nvmet takes the device's)", s.NQN, ns.NSID, ns.BlockSize))
			}
			if ns.ReadOnly {
				warn = append(warn, fmt.Sprintf("subsystem %s namespace %d: rdisk_read_only is left out", s.NQN, ns.NSID))
			}
			m := map[string]any{"device": dev, "enable": ns.Enable, "nsid": ns.NSID}
			if ns.ANAGrpID != 0 {
				m["ana_grpid"] = ns.ANAGrpID
			}
			if len(ns.ANA) > 0 {
				m["ana"] = ns.ANA
			}
			if len(ns.Resv) > 0 {
				m["resv"] = ns.Resv
			}
			nss = append(nss, m)
		}
		subs = append(subs, map[string]any{"allowed_hosts": append([]string{}, s.AllowedHosts...), "attr": attr,
			"namespaces": nss, "nqn": s.NQN})
	}
	slices.Sort(warn)
	b, err := json.MarshalIndent(map[string]any{"hosts": hosts, "ports": ports, "subsystems": subs}, "", "  ")
	if err != nil {
		return nil, nil, fmt.Errorf("writing the nvmetcli configuration: %w", err)
	}
	return append(b, '\n'), slices.Compact(warn), nil
}
