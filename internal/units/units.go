package units

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ParseSize parses a byte size.
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, fmt.Errorf("empty size")
	}
	i := len(t)
	for i > 0 && (t[i-1] < '0' || t[i-1] > '9') && t[i-1] != '.' {
		i--
	}
	num, unit := t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || v < 0 || math.IsInf(v, 0) || math.IsNaN(v) {
		return 0, fmt.Errorf("size %q: not a non-negative number", s)
	}
	unit = strings.TrimSuffix(strings.TrimSuffix(unit, "ib"), "b")
	mult := map[string]float64{"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40, "p": 1 << 50}[unit]
	if mult == 0 {
		return 0, fmt.Errorf("size %q: unknown unit %q (use K, M, G, T, P with optional B or iB)", s, t[i:])
	}
	r := v * mult
	if r > math.MaxInt64/2 {
		return 0, fmt.Errorf("size %q: too large", s)
	}
	if r != math.Trunc(r) {
		return 0, fmt.Errorf("size %q: not a whole number of bytes", s)
	}
	return int64(r), nil
}

// FormatSize prints n bytes with a binary unit ("128KiB", "1.5GiB").
func FormatSize(n int64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB"}
	v := float64(n)
	u := 0
	for v >= 1024 && u < len(units)-1 {
		v /= 1024
		u++
	}
	if v == math.Trunc(v) {
		return fmt.Sprintf("%d%s", int64(v), units[u])
	}
	return fmt.Sprintf("%.1f%s", v, units[u])
}

// FormatRate prints a byte rate with decimal units, as fio and perftest do.
func FormatRate(bytesPerSec float64) string {
	switch {
	case bytesPerSec >= 1e9:
		return fmt.Sprintf("%.2f GB/s", bytesPerSec/1e9)
	case bytesPerSec >= 1e6:
		return fmt.Sprintf("%.1f MB/s", bytesPerSec/1e6)
	case bytesPerSec >= 1e3:
		return fmt.Sprintf("%.1f kB/s", bytesPerSec/1e3)
	}
	return fmt.Sprintf("%.0f B/s", bytesPerSec)
}
