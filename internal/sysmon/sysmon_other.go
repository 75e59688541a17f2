//go:build !linux

package sysmon

import (
	"errors"
	"time"
)

// MaxSlack is the largest slack SetSlack accepts.
const MaxSlack = 10 * time.Millisecond

// ErrNotFound is returned when no thread could be told apart as sysmon.
var ErrNotFound = errors.New("sysmon: the runtime's monitor thread was not found")

// SetSlack is Linux only.
func SetSlack(d time.Duration) (int, error) {
	return 0, errors.ErrUnsupported
}

// Slack is Linux only.
func Slack(tid int) (time.Duration, error) { return 0, errors.ErrUnsupported }
