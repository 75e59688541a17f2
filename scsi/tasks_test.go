package scsi

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rdisk/rdisk/backstore"
)

// gateDisk blocks reads of LBA 100 until release is closed, announcing each
// blocked read on entered.
type gateDisk struct {
	*backstore.Mem
	entered chan struct{}
	release chan struct{}
}

func newGateDisk(t *testing.T) *gateDisk {
	return &gateDisk{Mem: newMem(t, testBlocks, testBS), entered: make(chan struct{}, 16), release: make(chan struct{})}
}

func (d *gateDisk) ReadAt(p []byte, off int64) error {
	if off == 100*testBS {
		d.entered <- struct{}{}
		<-d.release
	}
	return d.Mem.ReadAt(p, off)
}

// start runs c in a goroutine and returns a channel closed when it is done.
func start(s *Session, c *Command) chan struct{} {
	done := make(chan struct{})
	go func() {
		s.Execute(c)
		close(done)
	}()
	return done
}

// waitFor polls cond until it holds.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached")
		}
		time.Sleep(time.Millisecond)
	}
}

func readCmd(lba uint32, tag uint64) *Command {
	return &Command{CDB: rw10(OpRead10, lba, 1, 0), Tag: tag, Dir: DirIn, ExpectedLength: testBS, DataIn: make([]byte, testBS), Sense: make([]byte, SenseBufferLen)}
}

func TestAbortTask(t *testing.T) {
	t.Parallel()
	d := newGateDisk(t)
	f := newFixture(t, d, LUConfig{})
	c := readCmd(100, 7)
	done := start(f.s1, c)
	<-d.entered
	if r := f.s1.TaskManagement(t.Context(), TMFQueryTask, 0, 7); r != TMFSucceeded {
		t.Errorf("QUERY TASK: %v", r)
	}
	if r := f.s1.TaskManagement(t.Context(), TMFQueryTaskSet, 0, 0); r != TMFSucceeded {
		t.Errorf("QUERY TASK SET: %v", r)
	}
	if r := f.s1.TaskManagement(t.Context(), TMFAbortTask, 0, 8); r != TMFTaskNotFound {
		t.Errorf("ABORT TASK of an unknown tag: %v", r)
	}
	if r := f.s2.TaskManagement(t.Context(), TMFAbortTask, 0, 7); r != TMFTaskNotFound {
		t.Errorf("ABORT TASK from another nexus: %v", r)
	}
	// The abort waits for the backend read.
	res := make(chan TMFResponse)
	go func() { res <- f.s1.TaskManagement(t.Context(), TMFAbortTask, 0, 7) }()
	waitFor(t, func() bool { return c.aborted() })
	// Another abort with a short deadline gives up while the read is
	// blocked.
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	if r := f.s1.TaskManagement(ctx, TMFAbortTask, 0, 7); r != TMFFailed {
		t.Errorf("ABORT TASK with the read blocked: %v", r)
	}
	cancel()
	close(d.release)
	if r := <-res; r != TMFComplete {
		t.Errorf("ABORT TASK: %v", r)
	}
	<-done
	if !c.Aborted || c.Status != StatusTaskAborted || c.DataInLen != 0 {
		t.Errorf("aborted command: aborted %v status %v datain %d", c.Aborted, c.Status, c.DataInLen)
	}
	if r := f.s1.TaskManagement(t.Context(), TMFQueryTask, 0, 7); r != TMFComplete {
		t.Errorf("QUERY TASK after completion: %v", r)
	}
}

func TestClearTaskSetOtherNexus(t *testing.T) {
	t.Parallel()
	d := newGateDisk(t)
	f := newFixture(t, d, LUConfig{})
	mine, theirs := readCmd(100, 1), readCmd(100, 1)
	d1, d2 := start(f.s1, mine), start(f.s2, theirs)
	<-d.entered
	<-d.entered
	res := make(chan TMFResponse)
	go func() { res <- f.s1.TaskManagement(t.Context(), TMFClearTaskSet, 0, 0) }()
	waitFor(t, func() bool { return mine.aborted() && theirs.aborted() })
	close(d.release)
	if r := <-res; r != TMFComplete {
		t.Fatalf("CLEAR TASK SET: %v", r)
	}
	<-d1
	<-d2
	if !mine.Aborted || theirs.Aborted || theirs.Status != StatusTaskAborted {
		t.Errorf("mine aborted %v; theirs aborted %v status %v", mine.Aborted, theirs.Aborted, theirs.Status)
	}
}

func TestAbortWhileWaitingOrdered(t *testing.T) {
	t.Parallel()
	d := newGateDisk(t)
	f := newFixture(t, d, LUConfig{})
	blocker := readCmd(100, 1)
	db := start(f.s1, blocker)
	<-d.entered
	// An ORDERED command waits for the blocker, a SIMPLE one for the
	// ORDERED one.
	ord := readCmd(5, 2)
	ord.Attr = AttrOrdered
	do := start(f.s1, ord)
	g := &f.lu.tasks.gate
	waitFor(t, func() bool { g.mu.Lock(); defer g.mu.Unlock(); return len(g.ordered) == 1 })
	simple := readCmd(6, 3)
	ds := start(f.s1, simple)
	waitFor(t, func() bool { g.mu.Lock(); defer g.mu.Unlock(); return len(g.waiting) == 1 })
	select {
	case <-do:
		t.Fatal("ORDERED command ran before the earlier command completed")
	case <-ds:
		t.Fatal("SIMPLE command overtook the ORDERED one")
	default:
	}
	// HEAD OF QUEUE runs at once.
	hoq := readCmd(7, 4)
	hoq.Attr = AttrHeadOfQueue
	f.s1.Execute(hoq)
	good(t, hoq)
	// Aborting the ORDERED command releases the SIMPLE one, which still
	// waits for nothing but runs.
	if r := f.s1.TaskManagement(t.Context(), TMFAbortTask, 0, 2); r != TMFComplete {
		t.Fatalf("ABORT TASK: %v", r)
	}
	<-do
	if !ord.Aborted {
		t.Error("ORDERED command not aborted")
	}
	<-ds
	good(t, simple)
	close(d.release)
	<-db
	good(t, blocker)
}

func TestOrderedRunsAlone(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, LUConfig{})
	var running atomic.Int32
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				c := readCmd(uint32(g), uint64(g*1000+i))
				if i%10 == 0 {
					c.Attr = AttrOrdered
				}
				running.Add(1)
				f.s1.Execute(c)
				running.Add(-1)
				if c.Status != StatusGood {
					t.Errorf("status %v", c.Status)
				}
			}
		}()
	}
	wg.Wait()
	if g := &f.lu.tasks.gate; g.barriers.Load() != 0 || g.fast.Load() != 0 || g.slowActive != 0 || len(g.ordered) != 0 || len(g.waiting) != 0 {
		t.Errorf("gate not idle: %d %d %d %v %v", g.barriers.Load(), g.fast.Load(), g.slowActive, g.ordered, g.waiting)
	}
}

func TestACAAndClosedSession(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, LUConfig{})
	c := readCmd(0, 1)
	c.Attr = AttrACA
	f.s1.Execute(c)
	expect(t, c, KeyIllegalRequest, ASCInvalidMessageError)
	s := f.session("iqn.x:closing", 1)
	s.Close()
	s.Close()
	c = readCmd(0, 1)
	s.Execute(c)
	if !c.Aborted {
		t.Error("command on a closed session not aborted")
	}
	if r := s.TaskManagement(t.Context(), TMFAbortTaskSet, 0, 0); r != TMFFailed {
		t.Errorf("TMF on a closed session: %v", r)
	}
}

func TestSessionCloseAbortsCommands(t *testing.T) {
	t.Parallel()
	d := newGateDisk(t)
	f := newFixture(t, d, LUConfig{})
	s := f.session("iqn.x:lost", 1)
	c := readCmd(100, 1)
	done := start(s, c)
	<-d.entered
	closed := make(chan struct{})
	go func() { s.Close(); close(closed) }()
	waitFor(t, c.aborted)
	close(d.release)
	<-closed
	<-done
	if !c.Aborted {
		t.Error("command of a lost nexus not aborted")
	}
}

// TestConcurrentIO runs reads, writes, COMPARE AND WRITE and UNMAP from
// many goroutines and sessions (meant for -race). Plain writes and unmaps
// stay in each goroutine's own region (overlapping concurrent writes are a
// data race in the RAM disk itself); COMPARE AND WRITE and READ share one
// block, which the range lock serializes.
func TestConcurrentIO(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, LUConfig{})
	const shared = testBlocks - 1
	var wg sync.WaitGroup
	for g := 0; g < 6; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := f.s1
			if g%2 == 1 {
				s = f.s2
			}
			buf := make([]byte, 8*testBS)
			for i := 0; i < 40; i++ {
				lba := uint32(g*256 + (i*13)%240)
				switch i % 4 {
				case 0:
					good(t, out(s, rw10(OpWrite10, lba, 8, 0), buf))
				case 1:
					good(t, in(s, rw10(OpRead10, lba, 8, 0), 8*testBS))
					good(t, in(s, rw10(OpRead10, shared, 1, 0), testBS))
				case 2:
					c := out(s, caw(shared, 1, 0), make([]byte, 2*testBS))
					if c.Status != StatusGood && c.Status != StatusCheckCondition {
						t.Errorf("CAW status %v", c.Status)
					}
				case 3:
					p := unmapParams([2]uint64{uint64(lba), 4})
					good(t, out(s, unmapCDB(uint16(len(p))), p))
				}
			}
		}()
	}
	wg.Wait()
}
