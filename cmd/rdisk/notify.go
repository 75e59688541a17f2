package main

import (
	"log/slog"
	"strings"

	"github.com/coreos/go-systemd/v22/daemon"
)

// Readiness for systemd (Type=notify, deploy/systemd): a service started
// by systemd finds the notification socket in $NOTIFY_SOCKET and tells it,
// in one datagram, that it is ready (after everything listens) and later
// that it is stopping. Outside systemd NOTIFY_SOCKET is unset and both are
// no-ops.

// notifyReady tells systemd the service is ready, with status as the
// one-line STATUS= that systemctl status shows. A notification that cannot
// be sent is logged, not fatal: the service runs either way (systemd then
// times the start out, which is what the log explains).
func notifyReady(log *slog.Logger, status string) {
	state := daemon.SdNotifyReady
	if status = oneLine(status); status != "" {
		state += "\nSTATUS=" + status
	}
	if _, err := daemon.SdNotify(false, state); err != nil && log != nil {
		log.Warn("rdisk: telling systemd the service is ready (sd_notify READY=1)", "err", err)
	}
}

// notifyStopping tells systemd the service is shutting down (STOPPING=1),
// so that systemctl shows "deactivating" while connections drain.
func notifyStopping() {
	daemon.SdNotify(false, daemon.SdNotifyStopping)
}

// oneLine keeps a STATUS= value on its line: a newline would start another
// assignment in the datagram.
func oneLine(s string) string {
	return strings.NewReplacer("\r\n", "; ", "\n", "; ", "\r", "; ").Replace(strings.TrimSpace(s))
}
