package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/rdisk/rdisk/nvmeof"
	"github.com/rdisk/rdisk/nvmeof/host"
)

// The nvme-cli named commands (id-ctrl, id-ns, error-log) and nvme-cli's
// JSON for them and for smart-log: lowercase keys as nvme-cli's
// json_nvme_id_ctrl, json_nvme_id_ns, json_smart_log and json_error_log
// print them, numbers as numbers, the strings nvme-cli prints as strings
// (sn, mn, fr, subnqn, nguid, eui64). Scripts written against
// `nvme ... -o json` read these unchanged.

// jsonObj is a JSON object that keeps its keys in insertion order, as
// nvme-cli prints them.
type jsonObj struct {
	keys []string
	vals map[string]any
}

func newObj() *jsonObj { return &jsonObj{vals: map[string]any{}} }

func (o *jsonObj) add(k string, v any) *jsonObj {
	o.keys = append(o.keys, k)
	o.vals[k] = v
	return o
}

func (o *jsonObj) MarshalJSON() ([]byte, error) {
	b := []byte{'{'}
	for i, k := range o.keys {
		if i > 0 {
			b = append(b, ',')
		}
		kb, err := json.Marshal(k)
		if err != nil {
			return nil, err
		}
		vb, err := json.Marshal(o.vals[k])
		if err != nil {
			return nil, err
		}
		b = append(append(append(b, kb...), ':'), vb...)
	}
	return append(b, '}'), nil
}

func idCtrlJSON(id *nvmeof.IdentifyController) *jsonObj {
	o := newObj().add("vid", id.VID).add("ssvid", id.SSVID).add("sn", id.SN).add("mn", id.MN).add("fr", id.FR).
		add("rab", id.RAB).add("ieee", id.IEEE).add("cmic", id.CMIC).add("mdts", id.MDTS).add("cntlid", id.CNTLID).
		add("ver", uint32(id.VER)).add("rtd3r", id.RTD3R).add("rtd3e", id.RTD3E).add("oaes", id.OAES).add("ctratt", id.CTRATT).
		add("cntrltype", id.CNTRLTYPE).add("fguid", hexID(id.FGUID[:])).add("crdt1", id.CRDT1).add("crdt2", id.CRDT2).add("crdt3", id.CRDT3).
		add("oacs", id.OACS).add("acl", id.ACL).add("aerl", id.AERL).add("frmw", id.FRMW).add("lpa", id.LPA).add("elpe", id.ELPE).
		add("npss", id.NPSS).add("wctemp", id.WCTEMP).add("cctemp", id.CCTEMP).add("kas", id.KAS).add("anatt", id.ANATT).
		add("anacap", id.ANACAP).add("anagrpmax", id.ANAGRPMAX).add("nanagrpid", id.NANAGRPID).add("sqes", id.SQES).add("cqes", id.CQES).
		add("maxcmd", id.MAXCMD).add("nn", id.NN).add("oncs", id.ONCS).add("fuses", id.FUSES).add("fna", id.FNA).add("vwc", id.VWC).
		add("awun", id.AWUN).add("awupf", id.AWUPF).add("nwpc", id.NWPC).add("acwu", id.ACWU).add("sgls", id.SGLS).add("mnan", id.MNAN).
		add("subnqn", id.SUBNQN).add("ioccsz", id.IOCCSZ).add("iorcsz", id.IORCSZ).add("icdoff", id.ICDOFF).add("fcatt", id.FCATT).
		add("msdbd", id.MSDBD).add("ofcs", id.OFCS)
	psds := make([]*jsonObj, 0, len(id.PSD))
	for _, ps := range id.PSD {
		psds = append(psds, newObj().add("max_power", ps.MaxPower).add("flags", ps.Flags).add("entry_lat", ps.EntryLatency).
			add("exit_lat", ps.ExitLatency).add("read_tput", ps.RRT).add("read_lat", ps.RRL).add("write_tput", ps.RWT).add("write_lat", ps.RWL))
	}
	return o.add("psds", psds)
}

func idNSJSON(ns *nvmeof.IdentifyNamespace) *jsonObj {
	o := newObj().add("nsze", ns.NSZE).add("ncap", ns.NCAP).add("nuse", ns.NUSE).add("nsfeat", ns.NSFEAT).add("nlbaf", ns.NLBAF).
		add("flbas", ns.FLBAS).add("mc", ns.MC).add("dpc", ns.DPC).add("dps", ns.DPS).add("nmic", ns.NMIC).add("rescap", ns.RESCAP).
		add("fpi", ns.FPI).add("dlfeat", ns.DLFEAT).add("nawun", ns.NAWUN).add("nawupf", ns.NAWUPF).add("nacwu", ns.NACWU).
		add("nabsn", ns.NABSN).add("nabo", ns.NABO).add("nabspf", ns.NABSPF).add("noiob", ns.NOIOB).add("nvmcap", ns.NVMCAP).
		add("npwg", ns.NPWG).add("npwa", ns.NPWA).add("npdg", ns.NPDG).add("npda", ns.NPDA).add("nows", ns.NOWS).
		add("anagrpid", ns.ANAGRPID).add("nsattr", ns.NSATTR).add("nvmsetid", ns.NVMSETID).add("endgid", ns.ENDGID).
		add("nguid", hex.EncodeToString(ns.NGUID[:])).add("eui64", hex.EncodeToString(ns.EUI64[:]))
	lbafs := make([]*jsonObj, 0, len(ns.LBAF))
	for _, f := range ns.LBAF {
		lbafs = append(lbafs, newObj().add("ms", f.MS).add("ds", f.LBADS).add("rp", f.RP))
	}
	return o.add("lbafs", lbafs)
}

func smartJSON(l *nvmeof.SMARTLog) *jsonObj {
	o := newObj().add("critical_warning", l.CriticalWarning).add("temperature", l.Temperature).add("avail_spare", l.AvailableSpare).
		add("spare_thresh", l.AvailableSpareThreshold).add("percent_used", l.PercentageUsed).
		add("endurance_grp_critical_warning_summary", l.EnduranceGroupCriticalWarning).
		add("data_units_read", l.DataUnitsRead).add("data_units_written", l.DataUnitsWritten).
		add("host_read_commands", l.HostReads).add("host_write_commands", l.HostWrites).
		add("controller_busy_time", l.ControllerBusyTime).add("power_cycles", l.PowerCycles).add("power_on_hours", l.PowerOnHours).
		add("unsafe_shutdowns", l.UnsafeShutdowns).add("media_errors", l.MediaErrors).add("num_err_log_entries", l.ErrorLogEntries).
		add("warning_temp_time", l.WarningTempTime).add("critical_comp_time", l.CriticalTempTime)
	for i, t := range l.TempSensors {
		if t != 0 {
			o.add(fmt.Sprintf("temperature_sensor_%d", i+1), t)
		}
	}
	return o.add("thm_temp1_trans_count", l.ThermalMgmtTemp1Count).add("thm_temp2_trans_count", l.ThermalMgmtTemp2Count).
		add("thm_temp1_total_time", l.ThermalMgmtTemp1Time).add("thm_temp2_total_time", l.ThermalMgmtTemp2Time)
}

func errorLogJSON(entries []nvmeof.ErrorLogEntry) *jsonObj {
	errs := make([]*jsonObj, 0, len(entries))
	for _, e := range entries {
		if e.ErrorCount == 0 {
			continue
		}
		phase := 0
		if e.Phase {
			phase = 1
		}
		errs = append(errs, newObj().add("error_count", e.ErrorCount).add("sqid", e.SQID).add("cmdid", e.CID).
			add("status_field", uint16(e.Status)).add("phase_tag", phase).add("parm_error_location", e.ParamErrorLocation).
			add("lba", e.LBA).add("nsid", e.NSID).add("vs", e.VendorInfo).add("trtype", trTypeName(e.TrType)).
			add("cs", e.CommandSpecific))
	}
	return newObj().add("errors", errs)
}

func runIDCtrl(ctx context.Context, c *cli.Context, ctrl *host.Controller, u host.URL) error {
	id := ctrl.Identify()
	if c.Bool("json") {
		return printJSON(c.App.Writer, idCtrlJSON(&id))
	}
	printIDCtrl(c.App.Writer, &id)
	return nil
}

func runIDNS(ctx context.Context, c *cli.Context, ctrl *host.Controller, u host.URL) error {
	if u.NSID == 0 {
		return fmt.Errorf("id-ns needs a namespace: %s/NSID", u)
	}
	ns, err := ctrl.IdentifyNamespace(ctx, u.NSID)
	if err != nil {
		return err
	}
	if ns.NSZE == 0 {
		return fmt.Errorf("namespace %d of %s is not active", u.NSID, u.SubNQN)
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, idNSJSON(&ns))
	}
	var ids *nvmeof.NamespaceIDs
	if d, err := ctrl.NamespaceIDs(ctx, u.NSID); err == nil {
		ids = &d
	}
	printIDNS(c.App.Writer, u.NSID, &ns, ids)
	return nil
}

func runErrorLog(ctx context.Context, c *cli.Context, ctrl *host.Controller, u host.URL) error {
	entries, err := ctrl.ErrorLog(ctx)
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, errorLogJSON(entries))
	}
	w := c.App.Writer
	fmt.Fprintf(w, "Error Log Entries for device:%s entries:%d\n", u, len(entries))
	fmt.Fprintln(w, ".................")
	for i, e := range entries {
		if e.ErrorCount == 0 {
			continue
		}
		fmt.Fprintf(w, " Entry[%2d]\n.................\n", i)
		fmt.Fprintf(w, "error_count\t: %d\nsqid\t\t: %d\ncmdid\t\t: %#x\nstatus_field\t: %#x (%s)\nparm_err_loc\t: %#x\nlba\t\t: %#x\nnsid\t\t: %#x\ntrtype\t\t: %s\n.................\n",
			e.ErrorCount, e.SQID, e.CID, uint16(e.Status), e.Status, e.ParamErrorLocation, e.LBA, e.NSID, trTypeName(e.TrType))
	}
	return nil
}
