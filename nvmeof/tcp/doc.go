// Package tcp holds the wire codecs of the NVMe/TCP transport binding (NVM
// Express over Fabrics TCP Transport Specification 1.0, the "TCP spec"
// below; Linux include/linux/nvme-tcp.h): the 8-byte common header, the
// connection initialization PDUs (ICReq, ICResp), the command and response
// capsule PDUs, the data PDUs (H2CData, C2HData), Ready to Transfer (R2T),
// the terminate requests (H2CTermReq, C2HTermReq), and the CRC32C header and
// data digests.
//
// # Shape
//
// As in package nvmeof, headers are typed byte-slice views: Header, ICReq,
// ICResp, Data, R2T, TermReq are []byte types with accessors and an Encode
// method writing into the caller's buffer. A view never copies or owns the
// bytes it was made from.
//
// Receiving is split the way a stream receiver needs it: the receiver reads
// the 8-byte common header, asks CheckHeader how many more header bytes
// (the rest of the PDU header and its digest) to read and whether the type
// is acceptable, then gives the whole header to CheckPDU, which verifies the
// header digest and the PDU's length fields and returns where its data is
// (padding to skip, data length, whether a data digest follows). Both
// return an *Error carrying the Fatal Error Status and Information the
// receiver puts in its terminate request (TCP spec section 3.6.2.9/10):
// nothing in this package panics or slices out of range on any input.
//
// # Concurrency
//
// The functions are pure; views are as safe for concurrent use as the
// bytes behind them.
package tcp
