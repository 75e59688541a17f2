package host

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/rdisk/rdisk/backstore"
	"github.com/rdisk/rdisk/nvmeof"
	"github.com/rdisk/rdisk/nvmeof/auth"
)

// DH-HMAC-CHAP in-band authentication, as the Linux host runs it
// (drivers/nvme/host/auth.c, nvmf_connect_admin_queue and
// nvmf_connect_io_queue in fabrics.c): after the Fabrics Connect of every
// queue whose result has ATR set, the queue runs one exchange before any
// other command; a failure fails the Connect.

// ErrAuthRequired is matched (errors.Is) by the error of a Connect whose
// controller asks for DH-HMAC-CHAP authentication when Config has no
// DHCHAPSecret.
const ErrAuthRequired = errorString("DH-HMAC-CHAP authentication required")

// errConcat is the reason a controller's ASCR (secure channel
// concatenation) is refused.
const errConcat = errorString("secure channel concatenation (TLS keys from DH-HMAC-CHAP) is not supported by rdisk")

// AuthError is a queue's DH-HMAC-CHAP exchange that failed. Err is an
// *auth.Error when the protocol failed (errors.Is(err, auth.FailureFailed)
// and the other auth.FailureCodes tell why; Remote says whether the
// controller reported it with AUTH_Failure1 or the host found it and sent
// AUTH_Failure2), or the error of an Authentication Send or Receive
// command.
type AuthError struct {
	QID    uint16
	SubNQN string
	Err    error
}

func (e *AuthError) Error() string {
	return fmt.Sprintf("DH-HMAC-CHAP authentication of the %s to %s failed: %v", queueName(e.QID), e.SubNQN, e.Err)
}

// Unwrap returns Err.
func (e *AuthError) Unwrap() error { return e.Err }

// authRequired is the error of a queue the controller wants authenticated
// when the host has no secret (Linux: "qid N: no key", -ENOKEY).
type authRequired struct {
	qid    uint16
	subNQN string
}

func (e *authRequired) Error() string {
	return fmt.Sprintf("subsystem %s requires DH-HMAC-CHAP authentication (Connect of the %s): pass --dhchap-secret", e.subNQN, queueName(e.qid))
}

func (e *authRequired) Is(target error) bool { return target == ErrAuthRequired }

// queueName is "admin queue" or "queue N".
func queueName(qid uint16) string {
	if qid == 0 {
		return "admin queue"
	}
	return fmt.Sprintf("queue %d", qid)
}

// checkAuth validates the DH-HMAC-CHAP settings of a Config.
func (cfg *Config) checkAuth() error {
	if cfg.DHCHAPSecret == nil {
		if cfg.DHCHAPCtrlSecret != nil {
			return errors.New("a DH-HMAC-CHAP controller secret (bidirectional authentication) needs the host's secret too (--dhchap-secret)")
		}
		return nil
	}
	if err := cfg.DHCHAPSecret.Validate(); err != nil {
		return fmt.Errorf("DH-HMAC-CHAP secret: %w", err)
	}
	if cfg.DHCHAPCtrlSecret != nil {
		if err := cfg.DHCHAPCtrlSecret.Validate(); err != nil {
			return fmt.Errorf("DH-HMAC-CHAP controller secret: %w", err)
		}
	}
	if cfg.DHCHAPHashes != nil && (len(cfg.DHCHAPHashes) == 0 || len(cfg.DHCHAPHashes) > auth.MaxIDs) {
		return fmt.Errorf("%d DH-HMAC-CHAP hashes: want 1 to %d", len(cfg.DHCHAPHashes), auth.MaxIDs)
	}
	if cfg.DHCHAPGroups != nil && (len(cfg.DHCHAPGroups) == 0 || len(cfg.DHCHAPGroups) > auth.MaxIDs) {
		return fmt.Errorf("%d DH-HMAC-CHAP DH groups: want 1 to %d", len(cfg.DHCHAPGroups), auth.MaxIDs)
	}
	for _, h := range cfg.DHCHAPHashes {
		if !h.Valid() {
			return fmt.Errorf("DH-HMAC-CHAP hashes: unknown %s", h)
		}
	}
	for _, g := range cfg.DHCHAPGroups {
		if !g.Valid() {
			return fmt.Errorf("DH-HMAC-CHAP DH groups: unknown %s", g)
		}
	}
	return nil
}

// connectAuth acts on the result res of queue hq's Fabrics Connect: with
// ATR, it authenticates the queue; ASCR is refused (Linux: "qid N: secure
// concatenation is not supported", -EOPNOTSUPP), as is ATR without a
// secret.
func (c *Controller) connectAuth(ctx context.Context, hq hostQueue, res uint32) error {
	if res&(nvmeof.ConnectAuthReqATR|nvmeof.ConnectAuthReqASCR) == 0 {
		return nil
	}
	qid := hq.base().qid
	if res&nvmeof.ConnectAuthReqASCR != 0 {
		return fmt.Errorf("subsystem %s requires secure channel concatenation on the %s: %w", c.subNQN, queueName(qid), errConcat)
	}
	if c.cfg.DHCHAPSecret == nil {
		return &authRequired{qid: qid, subNQN: c.subNQN}
	}
	return c.authenticate(ctx, hq)
}

// authenticate runs one DH-HMAC-CHAP exchange on hq (nvme_queue_auth_work):
// Authentication Send of the AUTH_Negotiate, Authentication Receive of the
// challenge (AL 4096, CHAP_BUF_SIZE), Send of the Reply, Receive of
// Success1, and Send of Success2 when bidirectional. When the host gives up
// it sends the AUTH_Failure2 first; after an AUTH_Failure1 nothing. The
// transaction ID comes from the controller's counter, one per exchange.
func (c *Controller) authenticate(ctx context.Context, hq hostQueue) error {
	qid := hq.base().qid
	fail := func(err error) error { return &AuthError{QID: qid, SubNQN: c.subNQN, Err: err} }
	h, err := auth.NewHost(auth.HostConfig{
		HostNQN: c.cfg.HostNQN, SubsysNQN: c.subNQN,
		Secret: *c.cfg.DHCHAPSecret, CtrlSecret: c.cfg.DHCHAPCtrlSecret,
		Hashes: c.cfg.DHCHAPHashes, DHGroups: c.cfg.DHCHAPGroups, SeqNums: &c.authSeq,
	})
	if err != nil {
		return fail(err)
	}
	tid := uint16(c.authTID.Add(1) - 1)
	msg, _ := h.Start(tid) // never fails
	if err := authSend(ctx, hq, msg); err != nil {
		return fail(err)
	}
	buf := backstore.AlignedBuffer(auth.MaxMessageSize, 4096)
	for _, step := range [...]func([]byte) ([]byte, error){h.HandleChallenge, h.HandleSuccess1} {
		clear(buf)
		if err := authReceive(ctx, hq, buf); err != nil {
			return fail(err)
		}
		out, herr := step(buf)
		if out != nil {
			// The next message, or the AUTH_Failure2 telling the
			// controller why the host gives up; a failure to send that
			// one does not hide the reason.
			if err := authSend(ctx, hq, out); err != nil && herr == nil {
				herr = err
			}
		}
		if herr != nil {
			return fail(herr)
		}
	}
	lvl := c.log.Debug
	if qid == 0 {
		lvl = c.log.Info // Linux prints the admin queue's only
	}
	lvl("nvme host: authenticated", "subnqn", c.subNQN, "qid", qid, "hash", h.Hash(), "dhgroup", h.DHGroup(), "bidirectional", h.Bidirectional())
	return nil
}

// authSend sends msg with an Authentication Send command (TL len(msg)).
func authSend(ctx context.Context, hq hostQueue, msg []byte) error {
	_, err := hq.exec(ctx, "authentication send", msg, nvmeof.DirHostToCtrl, func(sqe nvmeof.SQE, dptr nvmeof.SGLFields) {
		sqe.Auth().Encode(&nvmeof.AuthFields{FCType: nvmeof.FCTypeAuthSend, DPTR: dptr,
			SECP: auth.SECP, SPSP0: auth.SPSP0, SPSP1: auth.SPSP1, Length: uint32(len(msg))})
	})
	return err
}

// authReceive reads the controller's next message into buf with an
// Authentication Receive command (AL len(buf)).
func authReceive(ctx context.Context, hq hostQueue, buf []byte) error {
	_, err := hq.exec(ctx, "authentication receive", buf, nvmeof.DirCtrlToHost, func(sqe nvmeof.SQE, dptr nvmeof.SGLFields) {
		sqe.Auth().Encode(&nvmeof.AuthFields{FCType: nvmeof.FCTypeAuthReceive, DPTR: dptr,
			SECP: auth.SECP, SPSP0: auth.SPSP0, SPSP1: auth.SPSP1, Length: uint32(len(buf))})
	})
	return err
}

// Reauthenticate runs DH-HMAC-CHAP again on the admin queue and then on
// every I/O queue (those concurrently), as Linux's nvme_ctrl_auth_work does
// when a secret is written to sysfs or a command completes with
// Authentication Required. I/O continues meanwhile. It returns the
// admin queue's *AuthError, or the I/O queues' joined; as in Linux a failed
// re-authentication does not fail the controller here (the controller
// decides what its queues may still do: rdisk's target answers them with
// Authentication Required). Calls are serialized; it needs
// Config.DHCHAPSecret.
func (c *Controller) Reauthenticate(ctx context.Context) error {
	if c.cfg.DHCHAPSecret == nil {
		return fmt.Errorf("re-authenticating to %s: no DH-HMAC-CHAP secret configured (--dhchap-secret)", c.subNQN)
	}
	c.authMu.Lock()
	defer c.authMu.Unlock()
	if err := c.Err(); err != nil {
		return fmt.Errorf("re-authenticating to %s: %w", c.subNQN, err)
	}
	if err := c.authenticate(ctx, c.admin); err != nil {
		return err
	}
	errs := make([]error, len(c.io))
	var wg sync.WaitGroup
	for i, q := range c.io {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = c.authenticate(ctx, q)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
