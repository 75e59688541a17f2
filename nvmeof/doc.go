// Package nvmeof holds the wire codecs of NVMe over Fabrics as rdisk speaks it
// over RDMA: 64-byte submission queue entries (SQEs) with their command
// variants, 16-byte completion queue entries (CQEs), SGL descriptors, the
// Fabrics commands and the 1024-byte Connect data, the NVMe/RDMA connection
// manager private data, Identify data structures, log pages (including the
// discovery log and the Asymmetric Namespace Access log, with the ANA
// states and their path related statuses) and the controller properties
// (CAP, VS, CC, CSTS).
//
// The layouts follow the NVM Express Base Specification, the NVMe over
// Fabrics Specification and its RDMA transport binding, cross-checked against
// the Linux definitions in include/linux/nvme.h and include/linux/nvme-rdma.h
// and the way drivers/nvme/target fills and checks them. Every field comment
// names the Linux struct member it matches.
//
// # Shape
//
// Fixed-size wire headers are typed byte-slice views in the style of gVisor's
// netstack headers: SQE, CQE, SGL, ConnectData, CMRequest and friends are
// []byte types with offset constants, accessors and an Encode(*Fields) method
// that writes a whole entry into the caller's buffer. A view never owns or
// copies memory: it reads and writes the bytes it was made from, so it is
// valid exactly as long as the caller keeps that buffer (for a received
// capsule, until the receive buffer is reposted). Accessors and Encode assume
// the view is at least the structure's size; the Parse functions check that
// before handing out a view, and nothing in this package panics on any byte
// sequence given to a Parse function.
//
// The large admin structures (Identify Controller and Namespace, SMART/Health,
// Error Information, Firmware Slot, Commands Supported and Effects, the
// discovery log) are Go structs with an Encode(b []byte) method that writes
// the 4096-byte (or log-page sized) wire form into a caller-owned buffer and a
// Parse function for the host side. They are off the I/O path and may
// allocate (strings, slices); the SQE, CQE, SGL and CM codecs do not.
//
// # Errors
//
// Parse failures are reported with unexported constant sentinel errors,
// wrapped with detail. A command that is well framed but carries a bad field
// yields a *CommandError holding the NVMe status to complete it with (DNR
// included) and the byte offset of the field, as Linux nvmet reports it in the
// Error Information log. A structure field that does not parse or encode
// yields a *FieldError naming the structure, the field and its offset. An
// NVMe/RDMA CM request that must be rejected yields an error wrapping the
// CMStatus to put in the reject private data (use errors.As).
//
// # Concurrency
//
// The package has no state. Views are plain slices: concurrent reads of one
// view are safe, a write concurrent with any other access is a data race, as
// for any []byte.
package nvmeof
