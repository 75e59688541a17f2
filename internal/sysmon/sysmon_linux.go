package sysmon

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// SetSlack sets the timer slack of the runtime's sysmon thread to d and
// returns that thread's ID. It takes up to about 50 ms. d must be between
// 1 ns and MaxSlack.
func SetSlack(d time.Duration) (int, error) {
	if d <= 0 || d > MaxSlack {
		return 0, fmt.Errorf("sysmon: slack %v: want more than 0 and at most %v", d, MaxSlack)
	}
	tid, err := find(50 * time.Millisecond)
	if err != nil {
		return 0, err
	}
	return tid, setThreadSlack(tid, d)
}

// Slack returns thread tid's timer slack.
func Slack(tid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(tid) + "/timerslack_ns")
	if err != nil {
		return 0, fmt.Errorf("sysmon: reading thread %d's timer slack: %w", tid, err)
	}
	ns, err := strconv.ParseInt(string(bytes.TrimSpace(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("sysmon: thread %d's timer slack %q: %w", tid, bytes.TrimSpace(b), err)
	}
	return time.Duration(ns), nil
}

func setThreadSlack(tid int, d time.Duration) error {
	f, err := os.OpenFile("/proc/"+strconv.Itoa(tid)+"/timerslack_ns", os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("sysmon: opening thread %d's timer slack: %w", tid, err)
	}
	_, err = f.WriteString(strconv.FormatInt(int64(d), 10))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		if errors.Is(err, unix.EPERM) {
			return fmt.Errorf("sysmon: setting thread %d's timer slack: %w (needs CAP_SYS_NICE)", tid, err)
		}
		return fmt.Errorf("sysmon: setting thread %d's timer slack: %w", tid, err)
	}
	return nil
}

// find samples the system call each thread is in until one thread other
// than the caller's stands out as the one in nanosleep (pick), or the
// budget runs out.
func find(budget time.Duration) (int, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	self := unix.Gettid()
	seen := make(map[int]int)
	buf := make([]byte, 256)
	task, err := os.Open("/proc/self/task")
	if err != nil {
		return 0, fmt.Errorf("sysmon: listing the threads: %w", err)
	}
	defer task.Close()
	end := time.Now().Add(budget)
	for time.Now().Before(end) {
		if _, err := task.Seek(0, 0); err != nil {
			return 0, fmt.Errorf("sysmon: listing the threads: %w", err)
		}
		names, err := task.Readdirnames(-1)
		if err != nil {
			return 0, fmt.Errorf("sysmon: listing the threads: %w", err)
		}
		for _, name := range names {
			tid, err := strconv.Atoi(name)
			if err != nil || tid == self {
				continue
			}
			n, ok := readSyscall(tid, buf)
			if ok && n == unix.SYS_NANOSLEEP {
				seen[tid]++
			}
		}
		if tid, ok := pick(seen); ok {
			return tid, nil
		}
	}
	return 0, fmt.Errorf("%w: seen %v", ErrNotFound, seen)
}

// pick returns the thread seen in nanosleep most often when that is at
// least five times and four times as often as any other thread (the
// runtime's other threads nanosleep only briefly, when spinning).
func pick(seen map[int]int) (int, bool) {
	best, first, second := 0, 0, 0
	for tid, n := range seen {
		switch {
		case n > first:
			best, first, second = tid, n, first
		case n > second:
			second = n
		}
	}
	if first < 5 || first < 4*second {
		return 0, false
	}
	return best, true
}

// readSyscall reads /proc/self/task/TID/syscall: the number of the system
// call the thread is blocked in.
func readSyscall(tid int, buf []byte) (int, bool) {
	f, err := os.Open("/proc/self/task/" + strconv.Itoa(tid) + "/syscall")
	if err != nil {
		return 0, false
	}
	n, _ := f.Read(buf)
	f.Close()
	return parseSyscall(buf[:n])
}

// parseSyscall parses the first field of a /proc/TID/syscall line: a
// system call number, or "running" / "-1" for a thread not in one.
func parseSyscall(b []byte) (int, bool) {
	if i := bytes.IndexAny(b, " \n"); i >= 0 {
		b = b[:i]
	}
	n, err := strconv.Atoi(string(b))
	if err != nil || n < 0 {
		return 0, false
	}
	return n, true
}
