package scsi

import "encoding/binary"

// Version descriptors (SPC-4 table 145) in the standard INQUIRY data.
const (
	versionSAM5  = 0x00a0
	versionSPC4  = 0x0460
	versionSBC3  = 0x04c0
	versionSRP   = 0x0940
	versionISCSI = 0x0960
)

// Vital product data pages.
const (
	vpdSupported       = 0x00
	vpdUnitSerial      = 0x80
	vpdDeviceID        = 0x83
	vpdBlockLimits     = 0xb0
	vpdBlockDevice     = 0xb1
	vpdLBProvisioning  = 0xb2
	stdInquiryLen      = 96
	vpdBlockLimitsLen  = 64
	vpdBlockDevLen     = 64
	vpdProvisioningLen = 8
)

var vpdPages = [...]uint8{vpdSupported, vpdUnitSerial, vpdDeviceID, vpdBlockLimits, vpdBlockDevice, vpdLBProvisioning}

// execInquiry: INQUIRY, standard data and the VPD pages 00h, 80h, 83h,
// B0h, B1h and B2h.
func execInquiry(lu *LU, c *Command, b cdb, it *itl) {
	alloc := int(b.u16(3))
	if b[1]&0x02 != 0 { // CMDDT (obsolete)
		c.fail(invalidCDB(1, 1))
		return
	}
	if b[1]&0x01 == 0 {
		if b[2] != 0 {
			c.fail(invalidCDB(2, -1))
			return
		}
		var d [stdInquiryLen]byte
		lu.standardInquiry(&d, it.sess.cfg.ProtocolID)
		c.respond(d[:], alloc)
		return
	}
	var buf [1024]byte
	var d []byte
	switch b[2] {
	case vpdSupported:
		d = buf[:4+len(vpdPages)]
		copy(d[4:], vpdPages[:])
	case vpdUnitSerial:
		d = buf[:4+len(lu.serial)]
		copy(d[4:], lu.serial)
	case vpdDeviceID:
		d = lu.deviceID(buf[:], it.sess)
	case vpdBlockLimits:
		d = buf[:vpdBlockLimitsLen]
		lu.blockLimits(d)
	case vpdBlockDevice:
		d = buf[:vpdBlockDevLen]
		if !lu.cfg.Rotational {
			binary.BigEndian.PutUint16(d[4:6], 1) // non-rotating medium
		}
	case vpdLBProvisioning:
		d = buf[:vpdProvisioningLen]
		if lu.thin() {
			d[5] = 0x80 | 0x40 | 0x20 | 0x04 // LBPU, LBPWS, LBPWS10, LBPRZ
			d[6] = 0x02                      // provisioning type: thin
		}
	default:
		c.fail(invalidCDB(2, -1))
		return
	}
	d[1] = b[2]
	binary.BigEndian.PutUint16(d[2:4], uint16(len(d)-4))
	c.respond(d, alloc)
}

// standardInquiry builds the 96-byte standard INQUIRY data (SPC-4 6.6.2).
func (lu *LU) standardInquiry(d *[stdInquiryLen]byte, proto uint8) {
	d[0] = 0x00 // peripheral qualifier 000b, direct access block device
	d[2] = 0x06 // SPC-4
	d[3] = 0x02 | 0x10
	d[4] = stdInquiryLen - 5
	d[5] = 0x10 // TPGS 01b: implicit asymmetric logical unit access
	if lu.xcopyOK() {
		d[5] |= 0x08 // 3PC: EXTENDED COPY
	}
	d[7] = 0x02 // CMDQUE
	copy(d[8:16], lu.vendor[:8])
	copy(d[16:32], lu.product[:16])
	copy(d[32:36], lu.rev[:4])
	v := [4]uint16{versionSAM5, versionSPC4, versionSBC3}
	switch proto {
	case ProtocolISCSI:
		v[3] = versionISCSI
	case ProtocolSRP:
		v[3] = versionSRP
	}
	for i, x := range v {
		binary.BigEndian.PutUint16(d[58+2*i:], x)
	}
}

// Designator header bytes (SPC-4 7.8.6.1).
const (
	codeBinary = 0x1
	codeASCII  = 0x2
	codeUTF8   = 0x3

	assocLU     = 0x00
	assocPort   = 0x10
	assocDevice = 0x20

	desigVendor   = 0x1
	desigEUI64    = 0x2
	desigNAA      = 0x3
	desigRelPort  = 0x4
	desigTPG      = 0x5
	desigSCSIName = 0x8
)

// deviceID builds VPD page 83h into buf: the LU's NAA, T10 vendor ID and
// EUI-64 designators, and for the session's target port the relative target
// port, target port group and SCSI name string designators, then the SCSI
// name of the target device.
func (lu *LU) deviceID(buf []byte, s *Session) []byte {
	p := 4
	put := func(proto, code, assoc, typ uint8, val []byte, pad int) {
		n := len(val)
		if pad > 0 {
			n = (n + 1 + pad - 1) / pad * pad
		}
		if p+4+n > len(buf) {
			return
		}
		d := buf[p : p+4+n]
		clear(d)
		d[0] = proto<<4 | code
		d[1] = typ | assoc
		if assoc != assocLU && proto != 0 {
			d[1] |= 0x80 // PIV: the protocol identifier is valid
		}
		d[3] = uint8(n)
		copy(d[4:], val)
		p += 4 + n
	}
	proto := s.cfg.ProtocolID
	put(0, codeBinary, assocLU, desigNAA, lu.naa, 0)
	var t10 [8 + 64]byte
	copy(t10[:8], lu.vendor[:8])
	n := 8 + copy(t10[8:], lu.serial)
	put(0, codeASCII, assocLU, desigVendor, t10[:n], 0)
	if lu.eui64 != ([8]byte{}) {
		put(0, codeBinary, assocLU, desigEUI64, lu.eui64[:], 0)
	}
	var rp [4]byte
	binary.BigEndian.PutUint16(rp[2:], s.cfg.RelativeTargetPort)
	put(proto, codeBinary, assocPort, desigRelPort, rp[:], 0)
	// Port and target device designators are those of the target the
	// session reached the LU through.
	if t := s.t; t != nil {
		var tpg [4]byte
		binary.BigEndian.PutUint16(tpg[2:], s.aluaGroup().id)
		put(proto, codeBinary, assocPort, desigTPG, tpg[:], 0)
		if s.cfg.TargetPort != "" {
			put(proto, codeUTF8, assocPort, desigSCSIName, []byte(s.cfg.TargetPort), 4)
		}
		if t.cfg.Name != "" {
			put(proto, codeUTF8, assocDevice, desigSCSIName, []byte(t.cfg.Name), 4)
		}
	}
	return buf[:p]
}

// blockLimits fills VPD page B0h (SBC-3 6.5.3), 64 bytes.
func (lu *LU) blockLimits(d []byte) {
	d[4] = 0x01 // WSNZ: WRITE SAME with 0 blocks is not supported
	d[5] = lu.cfg.MaxCompareAndWriteBlocks
	binary.BigEndian.PutUint16(d[6:8], uint16(1)<<lu.cfg.PhysicalBlockExp)
	binary.BigEndian.PutUint32(d[8:12], lu.cfg.MaxTransferBlocks)
	binary.BigEndian.PutUint32(d[12:16], lu.cfg.OptimalTransferBlocks)
	if lu.thin() {
		binary.BigEndian.PutUint32(d[20:24], maxUnmapLBACount)
		binary.BigEndian.PutUint32(d[24:28], maxUnmapBlockDescriptors)
		binary.BigEndian.PutUint32(d[28:32], uint32(1)<<lu.cfg.PhysicalBlockExp)
	}
	binary.BigEndian.PutUint64(d[36:44], lu.cfg.MaxWriteSameBlocks)
	maxAtomic, align, gran := lu.atomicLimits()
	binary.BigEndian.PutUint32(d[44:48], maxAtomic)
	binary.BigEndian.PutUint32(d[48:52], align)
	binary.BigEndian.PutUint32(d[52:56], gran)
	// MAXIMUM ATOMIC TRANSFER LENGTH WITH ATOMIC BOUNDARY and MAXIMUM
	// ATOMIC BOUNDARY SIZE stay 0: no atomic boundaries.
}
