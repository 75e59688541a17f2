// Package host is the SCSI initiator logic that rdisk's SRP and iSER
// (iSCSI) initiators share: probing a logical unit, turning blockdev
// requests into CDBs, the retry policy and the mapping of SCSI status and
// sense data to the blockdev sentinel errors. It knows nothing of RDMA, SRP
// or iSCSI: a transport runs commands (Runner for the synchronous probe,
// its own queues for I/O) and this package says what to send and what the
// answer means.
//
// # Probe
//
// Probe opens a LUN as Linux's sd driver does (sd_revalidate_disk): TEST
// UNIT READY until the unit attentions of the new I_T nexus are cleared,
// INQUIRY (a direct-access block device must be connected), READ
// CAPACITY(16), the block limits VPD page (B0h: maximum transfer length,
// maximum unmap LBA and descriptor counts, maximum write same length), the
// logical block provisioning VPD page (B2h: LBPU, LBPWS, LBPRZ) when
// READ CAPACITY(16) reports LBPME, and the MODE SENSE(6) header (WP,
// DPOFUA). Describe turns what it read into an LU: block size, capacity,
// blockdev capabilities and limits, ready for blockdev.Info.
//
// # I/O
//
// LU.BuildIO writes the CDB of a blockdev request into caller storage
// (nothing is allocated): READ(16), WRITE(16) with FUA when the LU reports
// DPOFUA, SYNCHRONIZE CACHE(16), UNMAP with one block descriptor for a
// discard (offered only when the LU reports LBPME, LBPU and an unmap limit
// in the block limits page, as SBC-3 4.7.3 and sd_discard_mode require),
// and WRITE SAME(16) of one zero block for write-zeroes (see BuildIO for why
// not NDOB). The transport moves the data the returned IO names.
//
// # Errors and retries
//
// A command that ends with a status other than GOOD is a *StatusError; it
// matches exactly one blockdev sentinel (StatusError.Class) with errors.Is.
// Retry says whether such a command is sent again: UNIT ATTENTION, BUSY and
// TASK SET FULL, at most MaxRetries times, on the probe path (Do) and on
// the transports' I/O paths alike.
//
// # Capacity changes
//
// A target that resizes a LUN reports CAPACITY DATA HAS CHANGED (2Ah/09h)
// to each nexus, and one that maps or unmaps LUNs REPORTED LUNS DATA HAS
// CHANGED (3Fh/0Eh). ParseUnitAttention tells them apart without
// allocating. Live holds an open LU's description and blockdev.Info as one
// snapshot that Refresh (READ CAPACITY(16)) replaces atomically; Live.Check
// checks a request and hands out the snapshot's LU to build it with, and
// Live.Do is Do that re-reads the capacity before it retries through a
// CAPACITY DATA HAS CHANGED and logs a LUN inventory change.
//
// # ALUA
//
// A Path (NewPath, after Probe) is what Linux's scsi_dh_alua keeps of one
// path: VPD page 83h (ParseDeviceID: the LU's NAA designator, DiskID, and
// the relative target port and target port group of this path) and, when
// the INQUIRY data has TPGS != 0, REPORT TARGET PORT GROUPS
// (ParseTargetPortGroups, extended header first), whose entry for the
// path's group gives its blockdev.AccessState (AccessState). The
// transports call Path.Failed with each CHECK CONDITION: NOT READY
// 04h/0Ah, 0Bh, 0Ch or 12h (SenseAccessState) records the state at once,
// fails the request with a *blockdev.PathError (ErrPath) and reads the
// state again on another goroutine, as a unit attention ALUAChanged
// (2Ah/06h, 2Ah/07h) does through Path.UnitAttention. StatusError.Class of
// such a refusal is blockdev.ErrPath. Probe goes on past a TEST UNIT READY
// refused for standby (the other probe commands are allowed there).
package host
