//go:build !linux

package sysmon

import (
	"errors"
	"time"
)

// SetSlack is Linux only.
func SetSlack(d time.Duration) (int, error) {
	return 0, errors.ErrUnsupported
}

// Slack is Linux only.
func Slack(tid int) (time.Duration, error) { return 0, errors.ErrUnsupported }
