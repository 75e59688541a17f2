package host

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/rdisk/rdisk/blockdev"
	"github.com/rdisk/rdisk/scsi"
)

// UnitAttention names what a unit attention reports, for the ones an
// initiator acts on beyond sending the command again.
type UnitAttention uint8

// Unit attentions.
const (
	// NoUnitAttention: not a CHECK CONDITION with UNIT ATTENTION sense.
	NoUnitAttention UnitAttention = iota
	// OtherUnitAttention: one that needs only the retry (power on or
	// reset, mode parameters changed, ...).
	OtherUnitAttention
	// CapacityChanged: CAPACITY DATA HAS CHANGED (2Ah/09h): the LU was
	// resized; READ CAPACITY tells the new size (Live.Refresh).
	CapacityChanged
	// LUNsChanged: REPORTED LUNS DATA HAS CHANGED (3Fh/0Eh): LUNs were
	// mapped or unmapped; REPORT LUNS tells the new inventory.
	LUNsChanged
	// ALUAChanged: ASYMMETRIC ACCESS STATE CHANGED (2Ah/06h) or IMPLICIT
	// ASYMMETRIC ACCESS STATE TRANSITION FAILED (2Ah/07h): REPORT TARGET
	// PORT GROUPS tells the new states (Path.UnitAttention).
	ALUAChanged
)

// String names the unit attention.
func (u UnitAttention) String() string {
	switch u {
	case NoUnitAttention:
		return "no unit attention"
	case OtherUnitAttention:
		return "unit attention"
	case CapacityChanged:
		return "CAPACITY DATA HAS CHANGED"
	case LUNsChanged:
		return "REPORTED LUNS DATA HAS CHANGED"
	case ALUAChanged:
		return "ASYMMETRIC ACCESS STATE CHANGED"
	}
	return fmt.Sprintf("UnitAttention(%d)", uint8(u))
}

// ParseUnitAttention tells which unit attention a command that completed
// with status st and sense data sense reports. It does not allocate, so
// that the transports' completion paths can call it per command.
func ParseUnitAttention(st scsi.Status, sense []byte) UnitAttention {
	if st != scsi.StatusCheckCondition {
		return NoUnitAttention
	}
	s, err := scsi.ParseSense(sense)
	if err != nil || s.Key != scsi.KeyUnitAttention {
		return NoUnitAttention
	}
	switch s.ASC {
	case scsi.ASCCapacityDataChanged:
		return CapacityChanged
	case scsi.ASCReportedLUNsDataChanged:
		return LUNsChanged
	case scsi.ASCAsymmetricAccessChanged, scsi.ASCImplicitTransitionFailed:
		return ALUAChanged
	}
	return OtherUnitAttention
}

// Live is the description of an open logical unit that follows its
// capacity: the LU (for BuildIO) and its blockdev.Info (for
// blockdev.Check) in one snapshot, replaced atomically by Refresh when the
// target reports CAPACITY DATA HAS CHANGED. Readers take a snapshot with
// one atomic load and never see an LU and an Info of different sizes. It is
// safe for concurrent use.
//
// A transport keeps one per opened LUN, checks and builds each request from
// Check's snapshot, and on a CapacityChanged unit attention (see
// ParseUnitAttention) calls Refresh before it sends the command again; a
// completion goroutine that must not wait for a command calls it from
// another goroutine. Live.Do does all that for the synchronous path.
type Live struct {
	cur atomic.Pointer[liveState]
	mu  sync.Mutex // orders Refresh calls
	log *slog.Logger
}

// liveState is one snapshot; it is never modified once stored.
type liveState struct {
	lu   LU
	info blockdev.Info
}

// NewLive returns a Live that starts as lu (from Probe or Describe)
// described by info (from lu.Info). Refresh keeps info's Name, Queues and
// QueueDepth. log receives the changes; nil discards them.
func NewLive(lu LU, info blockdev.Info, log *slog.Logger) *Live {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	l := &Live{log: log}
	l.cur.Store(&liveState{lu: lu, info: info})
	return l
}

// LU returns the current description.
func (l *Live) LU() LU { return l.cur.Load().lu }

// Info returns the current blockdev.Info.
func (l *Live) Info() blockdev.Info { return l.cur.Load().info }

// Check runs blockdev.Check on r against the current snapshot and returns
// that snapshot's LU, to build r's command with (LU.BuildIO): the size
// checked and the block size the LBAs are computed in are one snapshot's.
// The LU must not be modified. It does not allocate.
func (l *Live) Check(r *blockdev.Request) (*LU, error) {
	st := l.cur.Load()
	if err := blockdev.Check(&st.info, r); err != nil {
		return nil, err
	}
	return &st.lu, nil
}

// Refresh re-reads the capacity with READ CAPACITY(16) through r and,
// when it changed, replaces the snapshot: the LU is described again from
// the pages the probe read with the new capacity data (Describe, with the
// LU's MaxTransfer as the transport's limit), and its Info follows. On an
// error the snapshot stays.
func (l *Live) Refresh(ctx context.Context, r Runner) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	old := l.cur.Load()
	lun := old.lu.LUN
	cp, err := ReadCapacity(ctx, r, lun)
	if err != nil {
		return fmt.Errorf("LUN %d: re-reading the capacity: %w", lun, err)
	}
	if cp == old.lu.Pages.Capacity {
		return nil
	}
	p := old.lu.Pages
	p.Capacity = cp
	lu, err := Describe(lun, p, old.lu.MaxTransfer)
	if err != nil {
		return fmt.Errorf("LUN %d: after a capacity change: %w", lun, err)
	}
	info := lu.Info(old.info.Name, old.info.Queues, old.info.QueueDepth)
	l.cur.Store(&liveState{lu: lu, info: info})
	if lu.BlockSize != old.lu.BlockSize {
		l.log.Warn("scsi host: block size changed", "device", info.Name, "lun", lun, "old_block_size", old.lu.BlockSize, "block_size", lu.BlockSize)
	}
	l.log.Info("scsi host: capacity changed", "device", info.Name, "lun", lun, "old_size", old.info.Size, "size", info.Size)
	return nil
}

// Do runs c through r as the package's Do does, and acts on the unit
// attentions it sends the command again after: CAPACITY DATA HAS CHANGED
// for this LU's LUN re-reads the capacity (Refresh) first, so that when
// Do returns Info has the new size; REPORTED LUNS DATA HAS CHANGED is
// logged. A failed Refresh is logged and the command is still retried.
func (l *Live) Do(ctx context.Context, r Runner, c *Command) error {
	return do(ctx, r, c, func(ua UnitAttention) {
		l.UnitAttention(ctx, r, c.LUN, ua)
	})
}

// UnitAttention acts on a unit attention that a command to lun reported
// and that the caller is about to retry through (Retry said so): see Do.
// It may run commands through r, so it must not be called from a
// goroutine that r needs to complete them.
func (l *Live) UnitAttention(ctx context.Context, r Runner, lun uint64, ua UnitAttention) {
	name := l.cur.Load().info.Name
	switch ua {
	case CapacityChanged:
		if lun != l.cur.Load().lu.LUN {
			l.log.Info("scsi host: capacity of another LUN changed", "device", name, "lun", lun)
			return
		}
		if err := l.Refresh(ctx, r); err != nil {
			l.log.Warn("scsi host: re-reading the capacity failed", "device", name, "lun", lun, "err", err)
		}
	case LUNsChanged:
		l.log.Info("scsi host: reported LUNs data has changed", "device", name, "lun", lun)
	}
}
