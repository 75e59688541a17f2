package sysmon

import (
	"errors"
	"time"
)

// MaxSlack is the largest slack SetSlack accepts: sysmon never sleeps more
// than 10 ms at a time, so a larger slack would only delay its duties.
const MaxSlack = 10 * time.Millisecond

// ErrNotFound is returned when no thread could be told apart as sysmon.
var ErrNotFound = errors.New("sysmon: the runtime's monitor thread was not found (no single thread seen in nanosleep)")
