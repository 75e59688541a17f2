package host

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/rdisk/rdisk/backstore"
	"github.com/rdisk/rdisk/nvmeof"
)

// PropertyGet reads a controller property (nvmeof.PropCAP and friends).
func (c *Controller) PropertyGet(ctx context.Context, off uint32) (uint64, error) {
	size8 := nvmeof.PropertySize(off) == 8
	return c.admin.exec(ctx, "property get", nil, nvmeof.DirNone, func(sqe nvmeof.SQE, _ nvmeof.SGLFields) {
		sqe.Property().Encode(&nvmeof.PropertyFields{FCType: nvmeof.FCTypePropertyGet, Size8: size8, Offset: off})
	})
}

// PropertySet writes a controller property.
func (c *Controller) PropertySet(ctx context.Context, off uint32, v uint64) error {
	size8 := nvmeof.PropertySize(off) == 8
	_, err := c.admin.exec(ctx, "property set", nil, nvmeof.DirNone, func(sqe nvmeof.SQE, _ nvmeof.SGLFields) {
		sqe.Property().Encode(&nvmeof.PropertyFields{FCType: nvmeof.FCTypePropertySet, Size8: size8, Offset: off, Value: v})
	})
	return err
}

// identify runs an Identify command into a 4096-byte buffer.
func (c *Controller) identify(ctx context.Context, name string, cns uint8, nsid uint32, csi uint8) ([]byte, error) {
	b := backstore.AlignedBuffer(nvmeof.IdentifySize, 4096)
	_, err := c.admin.exec(ctx, name, b, nvmeof.DirCtrlToHost, func(sqe nvmeof.SQE, dptr nvmeof.SGLFields) {
		sqe.Identify().Encode(&nvmeof.IdentifyFields{NSID: nsid, DPTR: dptr, CNS: cns, CSI: csi})
	})
	return b, err
}

// IdentifyController reads the Identify Controller data (CNS 01h).
func (c *Controller) IdentifyController(ctx context.Context) (nvmeof.IdentifyController, error) {
	b, err := c.identify(ctx, "identify controller", nvmeof.CNSController, 0, 0)
	if err != nil {
		return nvmeof.IdentifyController{}, err
	}
	return nvmeof.ParseIdentifyController(b)
}

// IdentifyNamespace reads the Identify Namespace data (CNS 00h) of nsid.
// An inactive namespace reads as all zeroes (NSZE 0).
func (c *Controller) IdentifyNamespace(ctx context.Context, nsid uint32) (nvmeof.IdentifyNamespace, error) {
	b, err := c.identify(ctx, "identify namespace", nvmeof.CNSNamespace, nsid, 0)
	if err != nil {
		return nvmeof.IdentifyNamespace{}, err
	}
	return nvmeof.ParseIdentifyNamespace(b)
}

// NamespaceIDs reads the Namespace Identification Descriptor list (CNS
// 03h) of nsid: its EUI-64, NGUID, UUID and command set.
func (c *Controller) NamespaceIDs(ctx context.Context, nsid uint32) (nvmeof.NamespaceIDs, error) {
	b, err := c.identify(ctx, "identify namespace descriptors", nvmeof.CNSNSDescriptorList, nsid, 0)
	if err != nil {
		return nvmeof.NamespaceIDs{}, err
	}
	return nvmeof.ParseNamespaceIDs(b)
}

// ActiveNamespaces lists the active namespace IDs: from the Active
// Namespace ID list (CNS 02h, page by page), or, for controllers older than
// NVMe 1.1 or that refuse it, by identifying 1..NN.
func (c *Controller) ActiveNamespaces(ctx context.Context) ([]uint32, error) {
	if c.vs >= nvmeof.MakeVersion(1, 1, 0) {
		var list []uint32
		after := uint32(0)
		for {
			b, err := c.identify(ctx, "identify active namespace list", nvmeof.CNSActiveNSList, after, 0)
			if err != nil {
				var se *StatusError
				if errors.As(err, &se) && len(list) == 0 {
					break // fall back to scanning
				}
				return nil, err
			}
			n := len(list)
			if list, err = nvmeof.ParseNSIDList(b, list); err != nil {
				return nil, err
			}
			if len(list)-n < nvmeof.MaxNSIDListEntries {
				return list, nil
			}
			after = list[len(list)-1]
		}
	}
	var list []uint32
	for nsid := uint32(1); nsid <= c.id.NN && nsid <= 1024; nsid++ {
		ns, err := c.IdentifyNamespace(ctx, nsid)
		if err != nil {
			return nil, err
		}
		if ns.NSZE != 0 {
			list = append(list, nsid)
		}
	}
	return list, nil
}

// SetFeatures sets a feature and returns DW0 of the completion.
func (c *Controller) SetFeatures(ctx context.Context, fid uint8, nsid uint32, cdw11 uint32) (uint32, error) {
	res, err := c.admin.exec(ctx, "set features", nil, nvmeof.DirNone, func(sqe nvmeof.SQE, _ nvmeof.SGLFields) {
		sqe.Features().Encode(&nvmeof.FeaturesFields{Opcode: nvmeof.AdminSetFeatures, NSID: nsid, FID: fid, CDW11: cdw11})
	})
	return uint32(res), err
}

// GetFeatures reads the current value of a feature (DW0).
func (c *Controller) GetFeatures(ctx context.Context, fid uint8, nsid uint32) (uint32, error) {
	res, err := c.admin.exec(ctx, "get features", nil, nvmeof.DirNone, func(sqe nvmeof.SQE, _ nvmeof.SGLFields) {
		sqe.Features().Encode(&nvmeof.FeaturesFields{Opcode: nvmeof.AdminGetFeatures, NSID: nsid, FID: fid, Select: nvmeof.SelectCurrent})
	})
	return uint32(res), err
}

// KeepAlive sends one Keep Alive command.
func (c *Controller) KeepAlive(ctx context.Context) error {
	_, err := c.admin.exec(ctx, "keep alive", nil, nvmeof.DirNone, func(sqe nvmeof.SQE, _ nvmeof.SGLFields) {
		sqe.Encode(&nvmeof.SQEFields{Opcode: nvmeof.AdminKeepAlive, Flags: nvmeof.FlagSGLMetaBuf})
	})
	return err
}

// GetLogPage reads len(b) bytes of log page lid at byte offset lpo into b,
// in pieces of at most the transfer limit. rae keeps an asynchronous event
// outstanding (Retain Asynchronous Event).
func (c *Controller) GetLogPage(ctx context.Context, lid uint8, nsid uint32, lpo uint64, b []byte, rae bool) error {
	return c.getLogPage(ctx, lid, 0, nsid, lpo, b, rae)
}

// getLogPage is GetLogPage with a log specific field (LSP).
func (c *Controller) getLogPage(ctx context.Context, lid, lsp uint8, nsid uint32, lpo uint64, b []byte, rae bool) error {
	if len(b) == 0 || len(b)%4 != 0 || lpo%4 != 0 {
		return fmt.Errorf("get log page %#x: length %d and offset %d must be non-zero multiples of 4", lid, len(b), lpo)
	}
	chunk := adminMaxData
	if c.id.MDTS != 0 && c.id.MDTS < 20 {
		chunk = min(chunk, 4096<<c.id.MDTS)
	}
	for done := 0; done < len(b); {
		n := min(chunk, len(b)-done)
		part := b[done : done+n]
		off := lpo + uint64(done)
		_, err := c.admin.exec(ctx, "get log page", part, nvmeof.DirCtrlToHost, func(sqe nvmeof.SQE, dptr nvmeof.SGLFields) {
			sqe.GetLogPage().Encode(&nvmeof.GetLogPageFields{NSID: nsid, DPTR: dptr, LID: lid, LSP: lsp, RAE: rae, NUMD: nvmeof.NUMDForLength(uint32(n)), LPO: off})
		})
		if err != nil {
			return err
		}
		done += n
	}
	return nil
}

// SMARTLog reads the SMART / Health Information log page, for the whole
// controller (nsid nvmeof.NSIDAll) or one namespace.
func (c *Controller) SMARTLog(ctx context.Context, nsid uint32) (nvmeof.SMARTLog, error) {
	b := backstore.AlignedBuffer(nvmeof.SMARTLogSize, 4096)
	if err := c.GetLogPage(ctx, nvmeof.LogSMART, nsid, 0, b, false); err != nil {
		return nvmeof.SMARTLog{}, err
	}
	return nvmeof.ParseSMARTLog(b)
}

// ErrorLog reads the Error Information log page: up to ELPE+1 entries,
// newest first, without the empty ones.
func (c *Controller) ErrorLog(ctx context.Context) ([]nvmeof.ErrorLogEntry, error) {
	n := int(c.id.ELPE) + 1
	b := backstore.AlignedBuffer(n*nvmeof.ErrorLogEntrySize, 4096)
	if err := c.GetLogPage(ctx, nvmeof.LogError, nvmeof.NSIDAll, 0, b, false); err != nil {
		return nil, err
	}
	var out []nvmeof.ErrorLogEntry
	for i := range n {
		e, err := nvmeof.ParseErrorLogEntry(b[i*nvmeof.ErrorLogEntrySize:])
		if err != nil {
			return nil, err
		}
		if e.ErrorCount != 0 {
			out = append(out, e)
		}
	}
	return out, nil
}

// ChangedNamespaces reads (and so clears) the Changed Namespace List log.
func (c *Controller) ChangedNamespaces(ctx context.Context) (nsids []uint32, all bool, err error) {
	b := backstore.AlignedBuffer(nvmeof.ChangedNSListSize, 4096)
	if err := c.GetLogPage(ctx, nvmeof.LogChangedNS, nvmeof.NSIDAll, 0, b, false); err != nil {
		return nil, false, err
	}
	nsids, all = nvmeof.ParseChangedNSList(b, nil)
	return nsids, all, nil
}

// DiscoveryLog is a discovery controller's log page.
type DiscoveryLog struct {
	GenCtr  uint64
	Entries []nvmeof.DiscoveryLogEntry
}

// maxDiscoveryRecords bounds the entries a host reads (1024 entries is
// 1 MiB of log).
const maxDiscoveryRecords = 1024

// DiscoveryLog reads the whole Discovery log page consistently: the header
// for NUMREC, then header and entries, then the header again, retrying when
// the generation counter moved in between (NVMe over Fabrics, Discovery Log
// Page: a host re-reads the log if GENCTR changed).
func (c *Controller) DiscoveryLog(ctx context.Context) (*DiscoveryLog, error) {
	return readDiscoveryLog(func(b []byte) error {
		return c.GetLogPage(ctx, nvmeof.LogDiscovery, 0, 0, b, false)
	})
}

// discoveryTries bounds the re-reads of a discovery log that keeps changing.
const discoveryTries = 10

// readDiscoveryLog implements DiscoveryLog over read, which fills b with
// the first len(b) bytes of the log page.
func readDiscoveryLog(read func(b []byte) error) (*DiscoveryLog, error) {
	hdr := backstore.AlignedBuffer(nvmeof.DiscoveryLogHeaderSize, 4096)
	for try := 0; try < discoveryTries; try++ {
		if err := read(hdr); err != nil {
			return nil, err
		}
		h, err := nvmeof.ParseDiscoveryLogHeader(hdr)
		if err != nil {
			return nil, err
		}
		if h.RecFmt != 0 {
			return nil, fmt.Errorf("discovery log record format %d, want 0", h.RecFmt)
		}
		if h.NumRec > maxDiscoveryRecords {
			return nil, fmt.Errorf("discovery log has %d records, more than the %d rdisk reads", h.NumRec, maxDiscoveryRecords)
		}
		if h.NumRec == 0 {
			return &DiscoveryLog{GenCtr: h.GenCtr}, nil
		}
		full := backstore.AlignedBuffer(nvmeof.DiscoveryLogSize(int(h.NumRec)), 4096)
		if err := read(full); err != nil {
			return nil, err
		}
		fh, entries, err := nvmeof.ParseDiscoveryLog(full)
		if err != nil || fh.GenCtr != h.GenCtr || fh.NumRec != h.NumRec {
			continue // changed under us: read it again
		}
		if err := read(hdr); err != nil {
			return nil, err
		}
		if binary.LittleEndian.Uint64(hdr) != h.GenCtr {
			continue
		}
		return &DiscoveryLog{GenCtr: h.GenCtr, Entries: entries}, nil
	}
	return nil, fmt.Errorf("discovery log kept changing over %d reads", discoveryTries)
}

// postAER posts the Asynchronous Event Request in its reserved slot.
func (c *Controller) postAER() error { return c.admin.postAER() }

// onAER runs on the admin completion goroutine when the AER completes; it
// hands the event to aenWorker.
func (c *Controller) onAER(st nvmeof.Status, dw0 uint32, err error) {
	if err != nil || c.closing.Load() {
		return
	}
	if st != 0 {
		if st.Code() != nvmeof.StatusAbortSQDeleted {
			c.log.Warn("nvme host: asynchronous event request failed; no more events", "status", st)
		}
		return
	}
	select {
	case c.aen <- dw0:
	default:
		c.log.Warn("nvme host: asynchronous event dropped", "dw0", fmt.Sprintf("%#x", dw0))
	}
}

// aenWorker reads the log page that clears each event, refreshes the
// namespaces a Namespace Attribute Changed notice names, tells the caller
// and reposts the AER.
func (c *Controller) aenWorker() {
	defer c.bg.Done()
	for {
		var dw0 uint32
		select {
		case dw0 = <-c.aen:
		case <-c.stop:
			return
		case <-c.done:
			return
		}
		ev := Event{AsyncEvent: nvmeof.ParseAsyncEvent(dw0)}
		ctx, cancel := context.WithTimeout(context.Background(), c.cfg.CommandTimeout)
		var err error
		switch {
		case ev.Type == nvmeof.AsyncEventNotice && ev.Info == nvmeof.NoticeNSChanged:
			ev.Namespaces, ev.AllNamespaces, err = c.ChangedNamespaces(ctx)
		case ev.Type == nvmeof.AsyncEventNotice && ev.Info == nvmeof.NoticeANAChange && c.usesANA():
			// Reading the log clears the notice; a group in change is
			// read again by the ANA worker until it settles.
			var changing bool
			if changing, err = c.readANA(ctx); changing || err != nil {
				c.kickANA()
			}
		case ev.LogPage == nvmeof.LogDiscovery:
			err = c.GetLogPage(ctx, nvmeof.LogDiscovery, 0, 0, make([]byte, nvmeof.DiscoveryLogHeaderSize), false)
		case ev.LogPage == nvmeof.LogSMART:
			_, err = c.SMARTLog(ctx, nvmeof.NSIDAll)
		case ev.LogPage == nvmeof.LogError:
			_, err = c.ErrorLog(ctx)
		case ev.LogPage != 0:
			err = c.GetLogPage(ctx, ev.LogPage, nvmeof.NSIDAll, 0, make([]byte, 512), false)
		}
		cancel()
		if err != nil {
			c.log.Warn("nvme host: reading the log page of an event failed", "event", fmt.Sprintf("%#x", dw0), "err", err)
		}
		if ev.Type == nvmeof.AsyncEventNotice && ev.Info == nvmeof.NoticeNSChanged {
			// Without the list (the read failed), every namespace may have
			// changed.
			c.refreshNamespaces(ev.Namespaces, ev.AllNamespaces || err != nil)
		}
		c.log.Info("nvme host: asynchronous event", "type", ev.Type, "info", fmt.Sprintf("%#x", ev.Info), "log", fmt.Sprintf("%#x", ev.LogPage), "namespaces", ev.Namespaces)
		if c.cfg.OnEvent != nil {
			c.cfg.OnEvent(ev)
		}
		if c.closing.Load() || c.Err() != nil {
			return
		}
		if err := c.postAER(); err != nil {
			c.log.Warn("nvme host: reposting the asynchronous event request failed", "err", err)
			return
		}
	}
}
