// Package srp holds rdisk's SCSI RDMA Protocol (T10 srp-r16a, with SRP2's
// immediate data) wire formats: information unit codecs, data buffer
// descriptors and target port identifiers, shared by the SRP target
// (package srp/target, which serves the SCSI core over any rdma.Provider)
// and the initiator library (package srp/initiator, whose logical units are
// blockdev.Devices). Over iWARP both log in through the RDMA/CM private data
// exactly as Linux ib_srp and ib_srpt do, so the kernel initiator (ib_srp
// over siw) and rdisk's target interoperate.
//
// # Information units
//
// Each IU has a Fields struct and either a byte-slice view (LoginReqRDMA,
// LoginRsp, LoginRej, Cmd, Rsp...) with Encode and accessors, or
// Encode/Parse functions; parsers check lengths and opcodes first and return
// errors matching ErrShort, ErrOpcode or ErrLength. Multi-byte fields are
// big-endian; tags are opaque eight bytes echoed back. ParseData checks the
// data buffer descriptors of an SRP_CMD (direct, indirect with the table in
// the IU or not, immediate) and reports problems as *FormatError: those
// srp-r16a answers with SRP_T_LOGOUT carry its reason, the others are a
// CHECK CONDITION (INVALID FIELD IN COMMAND INFORMATION UNIT) with a field
// pointer. URL, PortID and the GUID helpers name target ports as ib_srp's
// add_target does.
package srp
