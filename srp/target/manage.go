package target

import (
	"bytes"
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/rdisk/rdisk/srp"
)

// Live management: what a management socket calls to inspect and change a
// serving Target. ACL changes apply to new logins; Port.Map, Unmap and
// CapacityChanged already notify the logged-in nexuses.

// ChannelInfo describes a logged-in RDMA channel.
type ChannelInfo struct {
	ID        uint64
	Port      string // target port ID (srp.PortID String form)
	Initiator string // initiator port ID
	Remote    string // the initiator's RDMA/CM address
	Depth     int    // request limit granted at login
	MaxIU     int    // longest initiator-to-target IU (the login's it_iu_len)
	// Commands is the number of SRP_CMDs answered with an SRP_RSP;
	// ReadBytes and WriteBytes the data-in written and the data-out read
	// (or received as immediate data) by them.
	Commands, ReadBytes, WriteBytes uint64
	Since                           time.Time // when the login arrived
}

// channelEndWait bounds CloseChannel's wait for the channel to end (its
// SRP_T_LOGOUT is given a second, then its commands are aborted; a disk
// may hold one a while).
const channelEndWait = 10 * time.Second

// Ports returns the target ports, sorted by ID.
func (t *Target) Ports() []*Port {
	t.mu.Lock()
	out := make([]*Port, 0, len(t.ports))
	for _, p := range t.ports {
		out = append(out, p)
	}
	t.mu.Unlock()
	slices.SortFunc(out, func(a, b *Port) int { return bytes.Compare(a.id[:], b.id[:]) })
	return out
}

// Channels returns the channels of every port, sorted by port, then ID.
func (t *Target) Channels() []ChannelInfo {
	var out []ChannelInfo
	for _, p := range t.Ports() {
		p.mu.Lock()
		for _, nx := range p.nexuses {
			for _, ch := range nx.channels {
				out = append(out, ch.info())
			}
		}
		p.mu.Unlock()
	}
	slices.SortStableFunc(out, func(a, b ChannelInfo) int {
		return cmp.Or(cmp.Compare(a.Port, b.Port), cmp.Compare(a.ID, b.ID))
	})
	return out
}

// info describes the channel (fields set by newChannel, and counters).
func (ch *channel) info() ChannelInfo {
	ci := ChannelInfo{
		ID: ch.id, Port: ch.port.id.String(), Initiator: ch.ipid.String(),
		Depth: ch.depth, MaxIU: ch.iuLen, Since: ch.since,
		Commands: ch.commands.Load(), ReadBytes: ch.readBytes.Load(), WriteBytes: ch.writeBytes.Load(),
	}
	if ch.peer != nil {
		ci.Remote = ch.peer.String()
	}
	return ci
}

// CloseChannel logs the channel with ID id out (SRP_T_LOGOUT, then a
// disconnect once it is sent or after a second) and waits for it to end.
// The other channels of its nexus stay.
func (t *Target) CloseChannel(id uint64) error {
	var found *channel
	for _, p := range t.Ports() {
		p.mu.Lock()
		for _, nx := range p.nexuses {
			for _, ch := range nx.channels {
				if ch.id == id {
					found = ch
				}
			}
		}
		p.mu.Unlock()
		if found != nil {
			break
		}
	}
	if found == nil {
		return fmt.Errorf("srp: no channel %d", id)
	}
	found.log.Info("srp: closing channel", "reason", "closed by the administrator")
	found.logoutFor(srp.TLogoutNoReason, endAdmin)
	select {
	case <-found.ended:
		return nil
	case <-time.After(channelEndWait):
		return fmt.Errorf("srp: channel %d did not end within %v", id, channelEndWait)
	}
}

// SetACL replaces the port's ACL (entries as PortConfig.AllowedInitiators
// takes them; allowAny accepts every initiator). Channels logged in stay.
func (p *Port) SetACL(allowed []string, allowAny bool) error {
	acl, err := parseACL(allowed)
	if err != nil {
		return err
	}
	p.acl.Store(&portACL{any: allowAny, entries: acl})
	p.t.log.Info("srp: ACL set", "port", p.id.String(), "allowed", allowed, "allow_any", allowAny)
	return nil
}

// LUNs returns the LUNs mapped in the port's SCSI target, in increasing
// order.
func (p *Port) LUNs() []uint64 { return p.st.LUNs() }
