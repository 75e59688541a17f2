package scsi

import (
	"encoding/binary"

	"github.com/rdisk/rdisk/backstore"
)

// Log pages (SPC-4 7.3): supported pages (00h), temperature (0Dh) and
// informational exceptions (2Fh), built from the disk's backstore.Health
// when it implements HealthReporter. Values the disk does not report read
// as "unknown" (temperature FFh). LOG SELECT is not implemented.
const (
	logSupported = 0x00
	logTemp      = 0x0d
	logIE        = 0x2f
)

var logPages = [...]uint8{logSupported, logTemp, logIE}

// healthSnapshot returns the disk's health, or a zero Health when it has
// none.
func (lu *LU) healthSnapshot() backstore.Health {
	if lu.health == nil {
		return backstore.Health{}
	}
	h, err := lu.health.Health()
	if err != nil || !h.Supported {
		return backstore.Health{}
	}
	return h
}

// healthWarning reports whether the disk raises a critical warning, which
// the informational exceptions page and REQUEST SENSE report as FAILURE
// PREDICTION THRESHOLD EXCEEDED.
func (lu *LU) healthWarning() bool {
	h := lu.healthSnapshot()
	return h.Valid.Has(backstore.FieldCriticalWarning) && h.CriticalWarning != 0
}

// temperature returns the temperature in degrees Celsius for a log
// parameter (0-254), or FFh when unknown.
func temperature(h backstore.Health) uint8 {
	if !h.Valid.Has(backstore.FieldTemperature) || h.Temperature < 0 {
		return 0xff
	}
	return uint8(min(h.Temperature, 254))
}

// execLogSense: LOG SENSE. Page control 01b (current cumulative values) is
// the only one with data; the others return the same values, as there are
// no thresholds or saved values.
func execLogSense(lu *LU, c *Command, b cdb, it *itl) {
	if b[1]&0x01 != 0 { // SP: saving is not supported
		c.fail(invalidCDB(1, 0))
		return
	}
	page := b[2] & 0x3f
	sub := b[3]
	ptr := b.u16(5)
	alloc := int(b.u16(7))
	if sub != 0 && !(page == logSupported && sub == 0xff) {
		c.fail(invalidCDB(3, -1))
		return
	}
	var d [64]byte
	n := 4
	switch page {
	case logSupported:
		if sub == 0xff { // supported pages and subpages
			d[0] = 0x40
			d[1] = 0xff
			for _, p := range logPages {
				d[n], d[n+1] = p, 0
				n += 2
			}
			d[n], d[n+1] = logSupported, 0xff
			n += 2
		} else {
			n += copy(d[4:], logPages[:])
		}
	case logTemp:
		h := lu.healthSnapshot()
		// 0000h temperature, 0001h reference temperature (unknown).
		params := [...][6]byte{
			{0x00, 0x00, 0x03, 0x02, 0x00, temperature(h)},
			{0x00, 0x01, 0x03, 0x02, 0x00, 0xff},
		}
		for _, p := range params {
			if binary.BigEndian.Uint16(p[0:2]) >= ptr {
				n += copy(d[n:], p[:])
			}
		}
	case logIE:
		h := lu.healthSnapshot()
		var asc ASC
		if h.Valid.Has(backstore.FieldCriticalWarning) && h.CriticalWarning != 0 {
			asc = ASCFailurePredictionThreshold
		}
		if ptr == 0 {
			p := [...]byte{0x00, 0x00, 0x03, 0x03, asc.Code(), asc.Qualifier(), temperature(h)}
			n += copy(d[n:], p[:])
		}
	default:
		c.fail(invalidCDB(2, 5))
		return
	}
	if page != logSupported || sub != 0xff {
		d[0] = page
	}
	binary.BigEndian.PutUint16(d[2:4], uint16(n-4))
	c.respond(d[:n], alloc)
}
