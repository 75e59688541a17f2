package initiator

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"

	"github.com/rdisk/rdisk/blockdev"
	"github.com/rdisk/rdisk/iser"
)

// Sentinel errors.
const (
	// ErrTimeout: a command got no response in time; the session is torn
	// down.
	ErrTimeout = errorString("iscsi: timed out")
)

type errorString string

func (e errorString) Error() string { return string(e) }

// ConnError is a session that failed: the connection broke or the target
// broke the protocol. It matches blockdev.ErrClosed.
type ConnError struct {
	Addr string
	Err  error
}

func (e *ConnError) Error() string {
	return fmt.Sprintf("iscsi session to %s failed: %v", e.Addr, e.Err)
}

func (e *ConnError) Unwrap() error { return e.Err }

// Is makes a failed session match blockdev.ErrClosed.
func (e *ConnError) Is(target error) bool { return target == blockdev.ErrClosed }

// Login connects to addr ("host:port"; 3260 when the port is omitted)
// over the transport and logs in to the target (a normal session).
func Login(ctx context.Context, tr iser.Transport, addr, targetName string, cfg Config) (*Session, error) {
	if targetName == "" {
		return nil, fmt.Errorf("iscsi: no target name")
	}
	return dial(ctx, tr, addr, targetName, iser.SessionNormal, cfg)
}

// Discover runs a discovery session at addr and returns every target the
// portal reports (SendTargets=All).
func Discover(ctx context.Context, tr iser.Transport, addr string, cfg Config) ([]iser.TargetRecord, error) {
	s, err := dial(ctx, tr, addr, "", iser.SessionDiscovery, cfg)
	if err != nil {
		return nil, err
	}
	recs, err := s.SendTargets(ctx, "All")
	if lerr := s.Logout(ctx); err == nil && lerr != nil && !errors.Is(lerr, blockdev.ErrClosed) {
		err = lerr
	}
	s.Close()
	return recs, err
}

func dial(ctx context.Context, tr iser.Transport, addr, targetName string, st iser.SessionType, cfg Config) (*Session, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		addr = net.JoinHostPort(addr, strconv.Itoa(DefaultPort))
	}
	lcfg := &iser.InitiatorConfig{
		Transport: tr, Settings: cfg.settings(), InitiatorName: cfg.InitiatorName, InitiatorAlias: cfg.InitiatorAlias,
		TargetName: targetName, SessionType: st, ISID: cfg.ISID, CHAP: cfg.CHAP, MutualCHAP: cfg.MutualCHAP,
	}
	if st == iser.SessionDiscovery {
		lcfg.TargetName = ""
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.ConnectTimeout)
	defer cancel()
	var s *Session
	var err error
	switch tr {
	case iser.TransportTCP:
		s, err = dialTCP(ctx, addr, lcfg, &cfg)
	case iser.TransportISER:
		if cfg.Provider == nil {
			return nil, fmt.Errorf("iscsi: iSER needs an RDMA provider")
		}
		s, err = dialISER(ctx, addr, lcfg, &cfg)
	default:
		return nil, fmt.Errorf("iscsi: unknown transport %v", tr)
	}
	if err != nil {
		return nil, err
	}
	go s.watchdog()
	s.log.Debug("iscsi initiator: logged in", "addr", addr, "target", targetName, "transport", tr, "tsih", s.tsih, "depth", s.depth)
	return s, nil
}
