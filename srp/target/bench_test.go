package target

import (
	"context"
	"github.com/rdisk/rdisk/srp/initiator"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/rdisk/rdisk/backstore"
	"github.com/rdisk/rdisk/internal/bench"
)

// TestBenchLoopback runs `rdisk bench`'s engine (internal/bench) over this
// initiator against this target on 127.0.0.1 (pure-Go iWARP on both ends):
// 4 KiB random reads at QD32 and 128 KiB sequential reads, then a verified
// random write/read mix. It only runs with RDISK_SRP_BENCH=1 (numbers, not
// a pass/fail check); RDISK_SRP_BENCH_TIME sets each run's duration (5s).
func TestBenchLoopback(t *testing.T) {
	if os.Getenv("RDISK_SRP_BENCH") == "" {
		t.Skip("set RDISK_SRP_BENCH=1 to run the SRP loopback benchmark")
	}
	d := 5 * time.Second
	if s := os.Getenv("RDISK_SRP_BENCH_TIME"); s != "" {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			t.Fatal(err)
		}
	}
	disk, err := backstore.NewMem(1<<30, 512)
	if err != nil {
		t.Fatal(err)
	}
	lt := startTarget(t, Config{}, PortConfig{}, disk)
	dev, err := initiator.Open(context.Background(), newProvider(t), lt.port.URL(lt.addr), initiator.Config{Logger: testLogger(), Channels: 1, QueueDepth: 32})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	runs := []bench.Options{
		{Pattern: bench.RandRead, BlockSize: 4096, QD: 32, Jobs: 1, Runtime: d, Size: 256 << 20},
		{Pattern: bench.Read, BlockSize: 128 << 10, QD: 32, Jobs: 1, Runtime: d, Size: 256 << 20},
		{Pattern: bench.RandRW, Mix: 50, BlockSize: 4096, QD: 32, Jobs: 1, Runtime: d, Size: 64 << 20, Verify: true},
	}
	for _, o := range runs {
		res, err := bench.Run(context.Background(), dev, o)
		if err != nil {
			t.Fatal(err)
		}
		var sb strings.Builder
		res.WriteText(&sb)
		t.Log("\n" + sb.String())
		if res.Errors > 0 || res.VerifyErrs > 0 {
			t.Errorf("%d errors, %d verify errors", res.Errors, res.VerifyErrs)
		}
	}
	t.Logf("target stats: %+v", lt.t.Stats())
}
