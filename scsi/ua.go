package scsi

import (
	"math/bits"
	"sync/atomic"
)

// itl is the state of one I_T nexus on one logical unit (an I_T_L nexus).
type itl struct {
	sess *Session
	lu   *LU
	// ua is the set of pending unit attention conditions (ua* bits).
	ua atomic.Uint32
	// prevent records PREVENT ALLOW MEDIUM REMOVAL from this nexus.
	prevent atomic.Bool
	// copies are the EXTENDED COPY statuses of this nexus.
	copies copyStatuses
}

// Unit attention conditions, in reporting priority order (lowest bit
// first). A condition of higher priority does not clear lower ones: each
// is reported once, by the next commands, in this order (SAM-5 5.14,
// UA_INTLCK_CTRL 00b).
const (
	uaPowerOn              = 1 << iota // 29h/00h: new nexus, target reset
	uaLUNReset                         // 29h/03h: LOGICAL UNIT RESET
	uaNexusLoss                        // 29h/07h: I_T NEXUS RESET
	uaReservationsPreempt              // 2Ah/03h
	uaReservationsRelease              // 2Ah/04h
	uaRegistrationsPreempt             // 2Ah/05h
	uaModeParamsChanged                // 2Ah/01h
	uaCapacityChanged                  // 2Ah/09h
	uaALUAChanged                      // 2Ah/06h: ASYMMETRIC ACCESS STATE CHANGED
)

var uaASC = [...]ASC{
	ASCPowerOnReset,
	ASCBusDeviceResetOccurred,
	ASCITNexusLossOccurred,
	ASCReservationsPreempted,
	ASCReservationsReleased,
	ASCRegistrationsPreempted,
	ASCModeParametersChanged,
	ASCCapacityDataChanged,
	ASCAsymmetricAccessChanged,
}

// takeUA removes and returns the highest-priority pending unit attention
// of the nexus on the LU, including the session-wide REPORTED LUNS DATA HAS
// CHANGED condition. ok is false when none is pending. It allocates
// nothing and takes no lock.
func (it *itl) takeUA() (ASC, bool) {
	for {
		v := it.ua.Load()
		if v == 0 {
			break
		}
		bit := uint32(1) << bits.TrailingZeros32(v)
		clear := bit
		if bit == uaPowerOn {
			// A power on or target reset subsumes the other resets.
			clear |= uaLUNReset | uaNexusLoss
		}
		if it.ua.CompareAndSwap(v, v&^clear) {
			return uaASC[bits.TrailingZeros32(bit)], true
		}
	}
	if it.sess.lunsChanged.Load() && it.sess.lunsChanged.Swap(false) {
		return ASCReportedLUNsDataChanged, true
	}
	return 0, false
}

// establishUA sets condition ua on every nexus of the LU except skip (which
// may be nil).
func (lu *LU) establishUA(skip *Session, ua uint32) {
	lu.mu.Lock()
	defer lu.mu.Unlock()
	for s, it := range lu.itls {
		if s != skip {
			it.ua.Or(ua)
		}
	}
}

// establishUAFor sets condition ua on the nexuses of the LU for which match
// returns true.
func (lu *LU) establishUAFor(match func(*Session) bool, ua uint32) {
	lu.mu.Lock()
	defer lu.mu.Unlock()
	for s, it := range lu.itls {
		if match(s) {
			it.ua.Or(ua)
		}
	}
}
