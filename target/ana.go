package target

import (
	"fmt"
	"slices"

	"github.com/rdisk/rdisk/nvmeof"
	"github.com/rdisk/rdisk/scsi"
)

// Access states for several gateways serving one disk: NVMe ANA groups on
// the NVMe-oF ports and ALUA target port groups on the SCSI transports,
// set in the model like everything else (and so saved, reloaded and
// restarted the same way).

// StateRequest is the body of the admin routes that set a state.
type StateRequest struct {
	// State is an ANA state (optimized, non-optimized, inaccessible,
	// persistent-loss, change) or an ALUA one (active-optimized,
	// active-non-optimized, standby, unavailable, offline,
	// transitioning); each is mapped to the other protocol's nearest.
	State string `json:"state"`
}

// GroupRequest is the body of the admin route that moves a namespace to
// an ANA group.
type GroupRequest struct {
	GrpID uint32 `json:"grpid"`
}

// anaOf reads a state word as an ANA state: ANA's own names, or ALUA's
// mapped (standby and unavailable are inaccessible, offline is persistent
// loss, transitioning is change).
func anaOf(word string) (nvmeof.ANAState, error) {
	if st, err := nvmeof.ParseANAState(word); err == nil {
		return st, nil
	}
	st, err := scsi.ParseALUAState(word)
	if err != nil {
		return 0, fmt.Errorf("state %q: want optimized, non-optimized, inaccessible, persistent-loss or change (or an ALUA state)", word)
	}
	switch st {
	case scsi.ALUAActiveOptimized:
		return nvmeof.ANAOptimized, nil
	case scsi.ALUAActiveNonOptimized:
		return nvmeof.ANANonOptimized, nil
	case scsi.ALUAOffline:
		return nvmeof.ANAPersistentLoss, nil
	case scsi.ALUATransitioning:
		return nvmeof.ANAChange, nil
	}
	return nvmeof.ANAInaccessible, nil
}

// aluaWord returns the ALUA name of a state word (ANA's names are
// accepted by scsi.ParseALUAState too).
func aluaWord(word string) (string, error) {
	st, err := scsi.ParseALUAState(word)
	if err != nil {
		return "", fmt.Errorf("state %q: want active-optimized, active-non-optimized, standby, unavailable, offline or transitioning (or an ANA state)", word)
	}
	return st.String(), nil
}

// SetANAState sets the state of ANA group grpid on NVMe-oF port id,
// adding the group to the port if it is not there (nvmet's
// ports/ID/ana_groups/GRPID/ana_state). Hosts connected through the port
// get an ANA Change event.
func (r *Running) SetANAState(id uint16, grpid uint32, state string) (*Changes, error) {
	st, err := anaOf(state)
	if err != nil {
		return nil, err
	}
	return r.change(func(c *Config) error {
		p := findPort(c, id)
		if p == nil {
			return notFound("port %d", id)
		}
		setANAGroup(p, grpid, st)
		return nil
	})
}

func setANAGroup(p *Port, grpid uint32, st nvmeof.ANAState) {
	for i := range p.ANAGroups {
		if p.ANAGroups[i].GrpID == int(grpid) {
			p.ANAGroups[i].ANA = map[string]string{"state": st.String()}
			return
		}
	}
	p.ANAGroups = append(p.ANAGroups, ANAGroup{GrpID: int(grpid), ANA: map[string]string{"state": st.String()}})
	slices.SortFunc(p.ANAGroups, func(a, b ANAGroup) int { return a.GrpID - b.GrpID })
}

// RemoveANAGroup removes ANA group grpid from port id (group 1 stays,
// optimized, as nvmet's default group).
func (r *Running) RemoveANAGroup(id uint16, grpid uint32) (*Changes, error) {
	return r.change(func(c *Config) error {
		p := findPort(c, id)
		if p == nil {
			return notFound("port %d", id)
		}
		n := len(p.ANAGroups)
		p.ANAGroups = slices.DeleteFunc(p.ANAGroups, func(g ANAGroup) bool { return g.GrpID == int(grpid) })
		if len(p.ANAGroups) == n {
			return notFound("port %d ANA group %d", id, grpid)
		}
		return nil
	})
}

// SetNamespaceANAGroup moves a namespace to ANA group grpid.
func (r *Running) SetNamespaceANAGroup(nqn string, nsid, grpid uint32) (*Changes, error) {
	if grpid < 1 || grpid > MaxANAGroups {
		return nil, fmt.Errorf("ANA group %d: want 1 to %d", grpid, MaxANAGroups)
	}
	return r.change(func(c *Config) error {
		ns := findNS(findSub(c, nqn), nsid)
		if ns == nil {
			return notFound("subsystem %s namespace %d", nqn, nsid)
		}
		ns.setANAGroupID(grpid)
		return nil
	})
}

// SetPortGroupState sets the state of ALUA target port group id of the
// iSCSI ("iscsi") or SRP ("srp") transport. Initiators get an ASYMMETRIC
// ACCESS STATE CHANGED unit attention.
func (r *Running) SetPortGroupState(transport string, id uint16, state string) (*Changes, error) {
	word, err := aluaWord(state)
	if err != nil {
		return nil, err
	}
	return r.change(func(c *Config) error {
		var pgs *[]PortGroup
		switch transport {
		case "iscsi":
			if c.ISCSI == nil {
				return notFound("rdisk_iscsi")
			}
			pgs = &c.ISCSI.PortGroups
		case "srp":
			if c.SRP == nil {
				return notFound("rdisk_srp")
			}
			pgs = &c.SRP.PortGroups
		default:
			return fmt.Errorf("transport %q: want iscsi or srp", transport)
		}
		for i := range *pgs {
			if (*pgs)[i].ID == id {
				(*pgs)[i].State = word
				return nil
			}
		}
		return notFound("%s port group %d", transport, id)
	})
}

// SetGatewayState sets this gateway's state everywhere at once: every ANA
// group of every NVMe-oF port (group 1 included), and every ALUA port
// group holding one of this gateway's own SCSI ports. It is the switch a
// failover script (or an operator draining a gateway) flips.
func (r *Running) SetGatewayState(state string) (*Changes, error) {
	st, err := anaOf(state)
	if err != nil {
		return nil, err
	}
	word, err := aluaWord(state) // ANA's names are ALUA aliases: it takes every word anaOf does
	if err != nil {
		return nil, err
	}
	return r.change(func(c *Config) error {
		for i := range c.Ports {
			p := &c.Ports[i]
			setANAGroup(p, 1, st)
			for j := range p.ANAGroups {
				p.ANAGroups[j].ANA = map[string]string{"state": st.String()}
			}
		}
		own := func(pgs []PortGroup, mine []uint16) {
			for i := range pgs {
				if len(pgs[i].Ports) == 0 || slices.ContainsFunc(pgs[i].Ports, func(p uint16) bool { return slices.Contains(mine, p) }) {
					pgs[i].State = word
				}
			}
		}
		if c.ISCSI != nil {
			own(c.ISCSI.PortGroups, c.ISCSI.ownPorts())
		}
		if c.SRP != nil {
			own(c.SRP.PortGroups, c.SRP.ownPorts())
		}
		return nil
	})
}
