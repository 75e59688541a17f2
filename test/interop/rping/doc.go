// Command rping is rdisk's re-implementation of rdma-core's rping
// (librdmacm/examples/rping.c) over the rdisk rdma API and the pure-Go iWARP
// provider. It speaks exactly the kernel rping protocol, so it interoperates
// with rdma-core's rping over Linux siw in both directions:
//
//	rping -s [-a ADDR] [-p PORT] [-C N] [-S SIZE] [-V] [-v]   server
//	rping -c  -a ADDR  [-p PORT] [-C N] [-S SIZE] [-V] [-v]   client
//
// The protocol, per iteration ("ping"):
//
//  1. client fills its "start" buffer with "rdma-ping-<n>: " followed by a
//     rolling A..z pattern, NUL-terminated, and Sends its rping_rdma_info
//     {be64 addr, be32 rkey, be32 size} (16 bytes) for it;
//  2. server RDMA-Reads size bytes of that buffer into its rdma buffer, then
//     Sends a 16-byte "go ahead";
//  3. client Sends the rping_rdma_info of its "rdma sink" buffer;
//  4. server RDMA-Writes strlen(data)+1 bytes into the sink, then Sends the
//     second "go ahead";
//  5. client (with -V) compares the start and sink buffers.
//
// rping's connection parameters: no private data, responder_resources
// (IRD) = initiator_depth (ORD) = 1, port space TCP, default port 7174. The
// server accepts with the IRD/ORD of the request. The client disconnects
// after -C iterations; the kernel server loops until it sees the disconnect
// and ignores -C. This server does the same, and with -C N fails when fewer
// than N iterations were done.
//
// -hexdump puts an in-process TCP relay between this program and the peer
// and logs every MPA frame and FPDU (decoded header, hex) in both
// directions: the interop harness uses it to see what went over the wire.
package main
