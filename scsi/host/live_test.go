package host

import (
	"bytes"
	"context"
	"encoding/binary"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/rdisk/rdisk/blockdev"
	"github.com/rdisk/rdisk/scsi"
)

func TestParseUnitAttention(t *testing.T) {
	sense := func(k scsi.SenseKey, asc scsi.ASC) []byte {
		b := make([]byte, scsi.SenseFixedLen)
		scsi.EncodeFixedSense(b, k, asc, -1)
		return b
	}
	for _, c := range []struct {
		st    scsi.Status
		sense []byte
		want  UnitAttention
	}{
		{scsi.StatusCheckCondition, sense(scsi.KeyUnitAttention, scsi.ASCCapacityDataChanged), CapacityChanged},
		{scsi.StatusCheckCondition, sense(scsi.KeyUnitAttention, scsi.ASCReportedLUNsDataChanged), LUNsChanged},
		{scsi.StatusCheckCondition, sense(scsi.KeyUnitAttention, scsi.ASCPowerOnReset), OtherUnitAttention},
		{scsi.StatusCheckCondition, sense(scsi.KeyIllegalRequest, scsi.ASCCapacityDataChanged), NoUnitAttention},
		{scsi.StatusCheckCondition, nil, NoUnitAttention},
		{scsi.StatusBusy, nil, NoUnitAttention},
		{scsi.StatusGood, nil, NoUnitAttention},
	} {
		if got := ParseUnitAttention(c.st, c.sense); got != c.want {
			t.Errorf("ParseUnitAttention(%v, %x) = %v, want %v", c.st, c.sense, got, c.want)
		}
	}
	ua := sense(scsi.KeyUnitAttention, scsi.ASCCapacityDataChanged)
	if n := testing.AllocsPerRun(100, func() { ParseUnitAttention(scsi.StatusCheckCondition, ua) }); n != 0 {
		t.Errorf("ParseUnitAttention: %.1f allocations", n)
	}
}

// lockedBuffer is a log destination for the tests.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// rc16 is READ CAPACITY(16) data for blocks blocks of bs bytes, thin.
func rc16(blocks uint64, bs uint32) []byte {
	b := make([]byte, 32)
	binary.BigEndian.PutUint64(b[0:8], blocks-1)
	binary.BigEndian.PutUint32(b[8:12], bs)
	b[14] = 0x80 // LBPME
	return b
}

func TestLiveDo(t *testing.T) {
	ctx := context.Background()
	f := &fakeLU{pages: rdiskPages(t, mode6RW)}
	f.pages["9e1000"] = rc16(2048, 512)
	lu, err := Probe(ctx, f, 0, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	var logs lockedBuffer
	l := NewLive(lu, lu.Info("test://lu", 2, 16), slog.New(slog.NewTextHandler(&logs, nil)))
	if l.Info().Size != 1<<20 || l.LU().Blocks != 2048 {
		t.Fatalf("start: %+v", l.Info())
	}

	// The LU grows; the next command reports it and is retried after the
	// capacity was read again.
	f.pages["9e1000"] = rc16(8192, 512)
	f.uas, f.uaASC, f.cdbs = 1, scsi.ASCCapacityDataChanged, nil
	if err := l.Do(ctx, f, &Command{CDB: []byte{scsi.OpTestUnitReady, 0, 0, 0, 0, 0}}); err != nil {
		t.Fatal(err)
	}
	if want := "000000000000 9e10000000000000000000000020" + "0000 000000000000"; strings.Join(f.cdbs, " ") != want {
		t.Errorf("CDBs %v, want TUR, READ CAPACITY(16), TUR", f.cdbs)
	}
	info := l.Info()
	if info.Size != 4<<20 || info.Name != "test://lu" || info.Queues != 2 || info.QueueDepth != 16 || l.LU().Blocks != 8192 {
		t.Errorf("after the resize: %+v, LU blocks %d", info, l.LU().Blocks)
	}
	if info.Caps != lu.Caps || info.MaxTransfer != lu.MaxTransfer || l.LU().Pages.Limits != lu.Pages.Limits {
		t.Errorf("the resize changed more than the size: %+v", info)
	}
	if !strings.Contains(logs.String(), "capacity changed") || !strings.Contains(logs.String(), "size=4194304") {
		t.Errorf("log: %s", logs.String())
	}

	// Check judges against the new size and hands out that snapshot's LU.
	r := &blockdev.Request{Op: blockdev.OpWriteZeroes, Offset: 4<<20 - 4096, Length: 4096}
	if got, err := l.Check(r); err != nil || got.Blocks != 8192 {
		t.Errorf("Check at the new end: %v", err)
	}
	r.Offset = 4 << 20
	if _, err := l.Check(r); err != blockdev.ErrRange {
		t.Errorf("Check past the new end: %v", err)
	}
	r.Offset = 0
	if n := testing.AllocsPerRun(100, func() { l.Check(r) }); n != 0 {
		t.Errorf("Check: %.1f allocations", n)
	}

	// REPORTED LUNS DATA HAS CHANGED is logged and retried, nothing read.
	f.uas, f.uaASC, f.cdbs = 1, scsi.ASCReportedLUNsDataChanged, nil
	if err := l.Do(ctx, f, &Command{CDB: []byte{scsi.OpTestUnitReady, 0, 0, 0, 0, 0}}); err != nil {
		t.Fatal(err)
	}
	if len(f.cdbs) != 2 || !strings.Contains(logs.String(), "reported LUNs data has changed") {
		t.Errorf("LUNs changed: CDBs %v, log %s", f.cdbs, logs.String())
	}

	// A capacity change of another LUN is not ours.
	f.pages["9e1000"] = rc16(16384, 512)
	f.uas, f.uaASC, f.cdbs = 1, scsi.ASCCapacityDataChanged, nil
	if err := l.Do(ctx, f, &Command{LUN: 5, CDB: []byte{scsi.OpTestUnitReady, 0, 0, 0, 0, 0}}); err != nil || len(f.cdbs) != 2 || l.Info().Size != 4<<20 {
		t.Errorf("another LUN's capacity: %v, CDBs %v, size %d", err, f.cdbs, l.Info().Size)
	}

	// A READ CAPACITY that fails keeps the old snapshot; the command is
	// still retried.
	f.fail = map[byte]scsi.SenseKey{0x9e: scsi.KeyMediumError}
	f.uas, f.cdbs = 1, nil
	if err := l.Do(ctx, f, &Command{CDB: []byte{scsi.OpTestUnitReady, 0, 0, 0, 0, 0}}); err != nil {
		t.Fatal(err)
	}
	if l.Info().Size != 4<<20 || !strings.Contains(logs.String(), "re-reading the capacity failed") {
		t.Errorf("failed refresh: size %d, log %s", l.Info().Size, logs.String())
	}
	delete(f.fail, 0x9e)

	// Refresh on demand; geometry the host cannot serve is refused.
	if err := l.Refresh(ctx, f); err != nil || l.Info().Size != 8<<20 {
		t.Errorf("Refresh: %v, size %d", err, l.Info().Size)
	}
	f.pages["9e1000"] = rc16(16, 1000)
	if err := l.Refresh(ctx, f); err == nil || l.Info().Size != 8<<20 {
		t.Errorf("Refresh to 1000-byte blocks: %v, size %d", err, l.Info().Size)
	}
	// A new block size is followed (requests are byte-addressed; the
	// LBAs come from the same snapshot).
	f.pages["9e1000"] = rc16(1024, 4096)
	if err := l.Refresh(ctx, f); err != nil || l.LU().Shift != 12 || l.Info().BlockSize != 4096 {
		t.Errorf("Refresh to 4096-byte blocks: %v, %+v", err, l.Info())
	}
}
