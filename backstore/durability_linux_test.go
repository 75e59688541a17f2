//go:build linux

package backstore

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The durability test runs a child process (this test binary again, running
// only TestDurabilityChild) that writes blocks to a file backstore and
// reports each block once it is durable: FUA writes when they return,
// plain writes after the Flush that follows them. The parent kills the
// child with SIGKILL in the middle of its writes, reopens the file and
// checks that every reported block holds the reported write or a later one.

const (
	durabilityEnv    = "RDISK_BACKSTORE_DURABILITY_CHILD" // path,direct
	durabilityBlocks = 256
	durabilityBS     = 4096
)

// durableBlock fills p (one block) with the content of write seq to block:
// a 16-byte header (seq, block) and a pattern of both.
func durableBlock(p []byte, block int64, seq uint64) {
	fillPattern(p, block*durabilityBS, seq*0x100000001b3)
	binary.LittleEndian.PutUint64(p[0:], seq)
	binary.LittleEndian.PutUint64(p[8:], uint64(block))
}

func TestDurability(t *testing.T) {
	t.Parallel()
	for _, direct := range []bool{false, true} {
		t.Run("direct="+strconv.FormatBool(direct), func(t *testing.T) {
			t.Parallel()
			testDurability(t, direct)
		})
	}
}

func testDurability(t *testing.T, direct bool) {
	path := filepath.Join(t.TempDir(), "durable.img")
	f, err := OpenFile(path, FileOptions{Create: true, Size: durabilityBlocks * durabilityBS, BlockSize: durabilityBS})
	if err != nil {
		t.Fatal(err)
	}
	f.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestDurabilityChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s,%v", durabilityEnv, path, direct))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Read reports until enough blocks were confirmed (wrapping around the
	// file more than once), then kill the child while it keeps writing.
	durable := map[int64]uint64{} // block -> last confirmed seq
	const confirmations = 3 * durabilityBlocks
	sc := bufio.NewScanner(out)
	n := 0
	for n < confirmations && sc.Scan() {
		var block int64
		var seq uint64
		if _, err := fmt.Sscanf(sc.Text(), "durable %d %d", &block, &seq); err != nil {
			continue // test framework output
		}
		durable[block] = seq
		n++
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for sc.Scan() {
	}
	err = cmd.Wait()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("child did not die of SIGKILL: %v (%v)", err, cmd.ProcessState)
	}
	if n < confirmations {
		t.Fatalf("child confirmed only %d writes before stopping", n)
	}

	r, err := OpenFile(path, FileOptions{BlockSize: durabilityBS, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	p := make([]byte, durabilityBS)
	want := make([]byte, durabilityBS)
	for block, seq := range durable {
		if err := r.ReadAt(p, block*durabilityBS); err != nil {
			t.Fatal(err)
		}
		got := binary.LittleEndian.Uint64(p)
		if got < seq || binary.LittleEndian.Uint64(p[8:]) != uint64(block) {
			t.Errorf("block %d: holds write %d of block %d, want write %d or later",
				block, got, binary.LittleEndian.Uint64(p[8:]), seq)
			continue
		}
		durableBlock(want, block, got)
		if string(p) != string(want) {
			t.Errorf("block %d: content of write %d is damaged", block, got)
		}
	}
	t.Logf("%d blocks checked after SIGKILL, %d confirmed writes", len(durable), n)
}

// TestDurabilityChild is the child process of TestDurability; it does
// nothing in a normal run.
func TestDurabilityChild(t *testing.T) {
	arg := os.Getenv(durabilityEnv)
	if arg == "" {
		return
	}
	path, mode, _ := strings.Cut(arg, ",")
	f, err := OpenFile(path, FileOptions{BlockSize: durabilityBS, Direct: mode == "true"})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	w := bufio.NewWriter(os.Stdout)
	p := AlignedBuffer(durabilityBS, f.DirectAlignment())
	var pending []int64 // written, waiting for the next Flush
	deadline := time.Now().Add(25 * time.Second)
	for seq := uint64(1); time.Now().Before(deadline); seq++ {
		block := int64(seq*7) % durabilityBlocks
		durableBlock(p, block, seq)
		flags := WriteFlags(0)
		if seq%3 == 0 {
			flags = FUA
		}
		if err := f.WriteAt(p, block*durabilityBS, flags); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		if flags&FUA != 0 {
			fmt.Fprintf(w, "durable %d %d\n", block, seq)
		} else {
			pending = append(pending, block, int64(seq))
		}
		if seq%5 == 0 {
			if err := f.Flush(); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(2)
			}
			for i := 0; i < len(pending); i += 2 {
				fmt.Fprintf(w, "durable %d %d\n", pending[i], pending[i+1])
			}
			pending = pending[:0]
		}
		w.Flush()
	}
	os.Exit(3) // the parent should have killed us
}
