package sysmon

import (
	"errors"
	"os"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestSetSlack(t *testing.T) {
	t.Parallel()
	tid, err := SetSlack(time.Millisecond)
	if errors.Is(err, unix.EPERM) {
		t.Skipf("no CAP_SYS_NICE to set another thread's timer slack: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if tid == os.Getpid() {
		t.Fatalf("SetSlack picked the main thread %d", tid)
	}
	if _, err := os.Stat("/proc/self/task/" + strconv.Itoa(tid)); err != nil {
		t.Fatalf("thread %d is not one of this process's: %v", tid, err)
	}
	got, err := Slack(tid)
	if err != nil {
		t.Fatal(err)
	}
	if got != time.Millisecond {
		t.Fatalf("thread %d's slack is %v, want 1ms", tid, got)
	}
	// The same thread again: sysmon lives as long as the process.
	tid2, err := SetSlack(2 * time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if tid2 != tid {
		t.Fatalf("second SetSlack found thread %d, first %d", tid2, tid)
	}
	if got, _ := Slack(tid); got != 2*time.Millisecond {
		t.Fatalf("thread %d's slack is %v after the second SetSlack, want 2ms", tid, got)
	}
}

func TestSetSlackRange(t *testing.T) {
	t.Parallel()
	for _, d := range []time.Duration{0, -time.Millisecond, MaxSlack + 1} {
		if _, err := SetSlack(d); err == nil {
			t.Errorf("SetSlack(%v) succeeded", d)
		}
	}
}

func TestPick(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		seen map[int]int
		want int
		ok   bool
	}{
		{map[int]int{}, 0, false},
		{map[int]int{5: 4}, 0, false},
		{map[int]int{5: 5}, 5, true},
		{map[int]int{5: 9, 6: 2}, 5, true},
		{map[int]int{6: 2, 5: 9}, 5, true},
		{map[int]int{5: 9, 6: 3}, 0, false},
		{map[int]int{5: 6, 6: 6}, 0, false},
		{map[int]int{7: 1, 6: 3000, 5: 2}, 6, true},
	} {
		got, ok := pick(c.seen)
		if got != c.want || ok != c.ok {
			t.Errorf("pick(%v) = %d, %v; want %d, %v", c.seen, got, ok, c.want, c.ok)
		}
	}
}

func TestParseSyscall(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   string
		want int
		ok   bool
	}{
		{"35 0x7ffd 0x0 0x0 0x0 0x0 0x0 0x7ffd 0x4700\n", 35, true},
		{"202 0xc000 0x80 0x0 0x0 0x0 0x0 0x7f 0x46\n", 202, true},
		{"running\n", 0, false},
		{"-1 0x7ffd 0x46\n", 0, false},
		{"", 0, false},
		{"35", 35, true},
	} {
		got, ok := parseSyscall([]byte(c.in))
		if got != c.want || ok != c.ok {
			t.Errorf("parseSyscall(%q) = %d, %v; want %d, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}

func FuzzParseSyscall(f *testing.F) {
	f.Add([]byte("35 0x7ffd 0x0\n"))
	f.Add([]byte("running\n"))
	f.Add([]byte("-1 0x0"))
	f.Fuzz(func(t *testing.T, b []byte) {
		n, ok := parseSyscall(b)
		if ok && n < 0 {
			t.Fatalf("parseSyscall(%q) = %d, true", b, n)
		}
		if !ok && n != 0 {
			t.Fatalf("parseSyscall(%q) = %d, false", b, n)
		}
	})
}
