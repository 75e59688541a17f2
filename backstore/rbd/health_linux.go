//go:build ceph && linux

package rbd

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/rdisk/rdisk/backstore"
)

// healthTTL is how long a Health answer is reused: hosts may poll the
// SMART log often, and every answer costs monitor commands.
const healthTTL = 2 * time.Second

// Health implements backstore.HealthReporter from the cluster, without
// ceph-mgr: the pool's flags in the OSD map (full, nearfull, full_quota:
// WarnSpare, and WarnReadOnly when full), the monitors' health checks
// (HEALTH_WARN/HEALTH_ERR: WarnReliability, or WarnSpare for the
// capacity checks), and, when the numbers are there, the pool's usage
// against its quota or the cluster's raw usage as PercentageUsed and
// AvailableSpare. Pool and cluster usage statistics come from ceph-mgr;
// without one they read 0 and are left out. The I/O counters are the
// image's own.
func (im *Image) Health() (backstore.Health, error) {
	im.ctlMu.RLock()
	defer im.ctlMu.RUnlock()
	if im.closed.Load() {
		return backstore.Health{}, fmt.Errorf("rbd %s: health: %w", im.name, backstore.ErrClosed)
	}
	im.healthMu.Lock()
	defer im.healthMu.Unlock()
	if !im.healthAt.IsZero() && time.Since(im.healthAt) < healthTTL {
		return im.withCounters(im.healthLast), nil
	}
	h := backstore.Health{
		Supported: true,
		Source:    backstore.SourceCluster,
		Valid:     backstore.FieldCriticalWarning | backstore.FieldMediaErrors | backstore.FieldPowerOnHours | backstore.FieldDataUnits | backstore.FieldHostCommands,
	}
	ph, err := im.poolHealth()
	if err != nil {
		return im.withCounters(h), err
	}
	h.CriticalWarning = ph.warn
	if ph.usedPct >= 0 {
		h.Valid |= backstore.FieldPercentageUsed | backstore.FieldAvailableSpare
		h.PercentageUsed = uint8(min(ph.usedPct, 255))
		h.AvailableSpare = uint8(max(0, 100-min(ph.usedPct, 100)))
		h.AvailableSpareThreshold = ph.spareThreshold
	}
	im.healthLast, im.healthAt = h, time.Now()
	return im.withCounters(h), nil
}

func (im *Image) withCounters(h backstore.Health) backstore.Health {
	s := im.st.snapshot()
	h.MediaErrors = s.Errors()
	h.PowerOnHours = uint64(time.Since(im.st.epoch) / time.Hour)
	h.DataUnitsRead = backstore.DataUnits(s.Read.Bytes)
	h.DataUnitsWritten = backstore.DataUnits(s.Write.Bytes)
	h.HostReadCommands = s.Read.Ops - s.Read.Errors
	h.HostWriteCommands = s.Write.Ops - s.Write.Errors
	return h
}

// poolState is what the monitors say about the image's pool.
type poolState struct {
	warn           backstore.CriticalWarning
	usedPct        int   // -1: unknown
	spareThreshold uint8 // 100 - nearfull ratio in percent
	checks         []string
}

func (im *Image) monJSON(cmd map[string]any, out any) error {
	cmd["format"] = "json"
	b, err := json.Marshal(cmd)
	if err != nil {
		return err
	}
	res, info, err := im.conn.MonCommand(b)
	if err != nil {
		return fmt.Errorf("rbd %s: mon command %s: %w (%s)", im.name, cmd["prefix"], err, info)
	}
	if err := json.Unmarshal(res, out); err != nil {
		return fmt.Errorf("rbd %s: mon command %s: decoding the answer: %w", im.name, cmd["prefix"], err)
	}
	return nil
}

// poolHealth asks the monitors (osd dump, health, osd pool get-quota).
func (im *Image) poolHealth() (poolState, error) {
	ps := poolState{usedPct: -1, spareThreshold: 15}
	var dump struct {
		NearfullRatio float64 `json:"nearfull_ratio"`
		Pools         []struct {
			Name       string `json:"pool_name"`
			FlagsNames string `json:"flags_names"`
		} `json:"pools"`
	}
	if err := im.monJSON(map[string]any{"prefix": "osd dump"}, &dump); err != nil {
		return ps, err
	}
	if dump.NearfullRatio > 0 && dump.NearfullRatio < 1 {
		ps.spareThreshold = uint8(100 - dump.NearfullRatio*100)
	}
	for _, p := range dump.Pools {
		if p.Name != im.cfg.Pool {
			continue
		}
		for _, f := range splitComma(p.FlagsNames) {
			switch f {
			case "nearfull", "backfillfull":
				ps.warn |= backstore.WarnSpare
			case "full", "full_quota":
				ps.warn |= backstore.WarnSpare | backstore.WarnReadOnly
			}
		}
	}
	var health struct {
		Status string                     `json:"status"`
		Checks map[string]json.RawMessage `json:"checks"`
	}
	if err := im.monJSON(map[string]any{"prefix": "health"}, &health); err != nil {
		return ps, err
	}
	for name := range health.Checks {
		ps.checks = append(ps.checks, name)
		switch name {
		case "POOL_NEAR_FULL", "OSD_NEARFULL", "OSD_BACKFILLFULL", "POOL_BACKFILLFULL":
			ps.warn |= backstore.WarnSpare
		case "POOL_FULL", "OSD_FULL":
			ps.warn |= backstore.WarnSpare | backstore.WarnReadOnly
		default:
			ps.warn |= backstore.WarnReliability
		}
	}
	if health.Status == "HEALTH_ERR" {
		ps.warn |= backstore.WarnReliability
	}
	// Usage: the pool's bytes against its quota, else the cluster's raw
	// usage. Both come from ceph-mgr's statistics (0 without a mgr).
	var quota struct {
		MaxBytes uint64 `json:"quota_max_bytes"`
	}
	// Without ceph-mgr, get-quota fails ("no stats for pool"): usage
	// unknown then.
	qerr := im.monJSON(map[string]any{"prefix": "osd pool get-quota", "pool": im.cfg.Pool}, &quota)
	if st, err := im.ioctx.GetPoolStats(); qerr == nil && err == nil && quota.MaxBytes > 0 && st.Num_bytes > 0 {
		ps.usedPct = int(st.Num_bytes * 100 / quota.MaxBytes)
	} else if cs, err := im.conn.GetClusterStats(); err == nil && cs.Kb > 0 && cs.Kb_used > 0 {
		ps.usedPct = int(cs.Kb_used * 100 / cs.Kb)
	}
	return ps, nil
}

func splitComma(s string) []string {
	var out []string
	for len(s) > 0 {
		i := 0
		for i < len(s) && s[i] != ',' {
			i++
		}
		if i > 0 {
			out = append(out, s[:i])
		}
		if i == len(s) {
			break
		}
		s = s[i+1:]
	}
	return out
}
