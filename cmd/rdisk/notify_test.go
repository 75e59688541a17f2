package main

import (
	"bytes"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// notifySocket listens on a unixgram socket as systemd's notification
// socket and points NOTIFY_SOCKET at it (t.Setenv: the test cannot be
// parallel).
func notifySocket(t *testing.T) *net.UnixConn {
	t.Helper()
	// A short directory: a unix socket path has at most 107 bytes.
	dir, err := os.MkdirTemp("", "notify")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	t.Setenv("NOTIFY_SOCKET", path)
	return conn
}

// readDatagram returns the next datagram on conn, failing after a second.
func readDatagram(t *testing.T, conn *net.UnixConn) string {
	t.Helper()
	conn.SetReadDeadline(time.Now().Add(time.Second))
	buf := make([]byte, 4096)
	n, err := conn.Read(buf)
	if err != nil {
		t.Fatalf("no notification datagram: %v", err)
	}
	return string(buf[:n])
}

func TestNotifyReadyAndStopping(t *testing.T) {
	conn := notifySocket(t)
	var logBuf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logBuf, nil))

	notifyReady(log, "serving 1 namespace on 127.0.0.1:4420")
	if got, want := readDatagram(t, conn), "READY=1\nSTATUS=serving 1 namespace on 127.0.0.1:4420"; got != want {
		t.Errorf("ready datagram = %q, want %q", got, want)
	}
	// A status of several lines stays one STATUS= assignment.
	notifyReady(log, "line one\nline two\n")
	if got, want := readDatagram(t, conn), "READY=1\nSTATUS=line one; line two"; got != want {
		t.Errorf("ready datagram = %q, want %q", got, want)
	}
	notifyReady(log, "")
	if got, want := readDatagram(t, conn), "READY=1"; got != want {
		t.Errorf("ready datagram without a status = %q, want %q", got, want)
	}
	notifyStopping()
	if got, want := readDatagram(t, conn), "STOPPING=1"; got != want {
		t.Errorf("stopping datagram = %q, want %q", got, want)
	}
	if logBuf.Len() != 0 {
		t.Errorf("logged while notifying: %s", logBuf.String())
	}
	if os.Getenv("NOTIFY_SOCKET") == "" {
		t.Error("NOTIFY_SOCKET was unset: child processes (a re-exec) could not notify")
	}
}

func TestNotifyWithoutSocketIsNoop(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	os.Unsetenv("NOTIFY_SOCKET") // restored by t.Setenv's cleanup
	var logBuf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logBuf, nil))
	notifyReady(log, "ready")
	notifyStopping()
	notifyReady(nil, "ready") // a nil logger is fine too
	if logBuf.Len() != 0 {
		t.Errorf("logged without NOTIFY_SOCKET: %s", logBuf.String())
	}
}

func TestNotifyUnreachableSocketLogs(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("NOTIFY_SOCKET", filepath.Join(dir, "nobody-listens.sock"))
	var logBuf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logBuf, nil))
	notifyReady(log, "ready")
	notifyStopping() // no logger: silently dropped
	if !strings.Contains(logBuf.String(), "READY=1") || !strings.Contains(logBuf.String(), "level=WARN") {
		t.Errorf("an unreachable NOTIFY_SOCKET was not logged as a warning: %q", logBuf.String())
	}
}
