package target

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/rdisk/rdisk/iser"
	"github.com/rdisk/rdisk/iser/initiator"
	"github.com/rdisk/rdisk/scsi"
)

// TestLogoutReleasesReservationFirst: a RESERVE(6) held by a session is
// released before its Logout Response goes out (an I_T nexus loss
// completes its SCSI effects before the initiator is told the session is
// over), so another initiator's RESERVE(6) right after the logout
// succeeds, every time.
func TestLogoutReleasesReservationFirst(t *testing.T) {
	t.Parallel()
	tg := newTestTarget(t, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go tg.Serve(context.Background(), ln)
	pt := &portal{tg: tg, addr: ln.Addr().String()}
	b := pt.mustLogin(t, iser.TransportTCP, fuzzIQN, initiator.Config{InitiatorName: "iqn.2026-12.io.rdisk:b", CommandTimeout: 20 * time.Second})
	reserve := func(s *initiator.Session) scsi.Status {
		cmd := &initiator.Command{CDB: []byte{scsi.OpReserve6, 0, 0, 0, 0, 0}}
		execute(t, s, cmd)
		if cmd.Status == scsi.StatusCheckCondition { // a unit attention first
			execute(t, s, cmd)
		}
		return cmd.Status
	}
	release := []byte{scsi.OpRelease6, 0, 0, 0, 0, 0}
	reserve(b)
	execute(t, b, &initiator.Command{CDB: release})
	for i := range 100 {
		a := pt.mustLogin(t, iser.TransportTCP, fuzzIQN, initiator.Config{InitiatorName: "iqn.2026-12.io.rdisk:a", CommandTimeout: 20 * time.Second})
		if st := reserve(a); st != scsi.StatusGood {
			t.Fatalf("iteration %d: A's RESERVE(6): %v", i, st)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := a.Logout(ctx)
		cancel()
		if err != nil {
			t.Fatalf("iteration %d: logout: %v", i, err)
		}
		if st := reserve(b); st != scsi.StatusGood {
			t.Fatalf("iteration %d: B's RESERVE(6) right after A logged out: %v (A's reservation outlived its logout)", i, st)
		}
		execute(t, b, &initiator.Command{CDB: release})
		a.Close()
	}
}
