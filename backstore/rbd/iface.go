package rbd

import "github.com/rdisk/rdisk/backstore"

// Interface checks (both builds).
var (
	_ backstore.AsyncDisk      = (*Image)(nil)
	_ backstore.VectoredDisk   = (*Image)(nil)
	_ backstore.Discarder      = (*Image)(nil)
	_ backstore.ZeroWriter     = (*Image)(nil)
	_ backstore.Resizer        = (*Image)(nil)
	_ backstore.Rescanner      = (*Image)(nil)
	_ backstore.SizeWatcher    = (*Image)(nil)
	_ backstore.HealthReporter = (*Image)(nil)
	_ backstore.TraitsReporter = (*Image)(nil)
	_ backstore.StatsReporter  = (*Image)(nil)
)
