// Package libiscsi runs libiscsi's conformance suite, iscsi-test-cu (Debian
// package libiscsi-bin), against rdisk's iSCSI/TCP target: one target with
// two portals (the second path the MultipathIO tests need) and three RAM
// LUs: LUN 0 with 4 KiB physical blocks and WRITE ATOMIC, LUN 1 with one
// logical block per physical block and LUN 2 read-only, for the few tests
// that need those (see elsewhere in the test). The test skips when
// iscsi-test-cu is not installed.
//
// The normal run takes the acceptance families (about 25 s on a 2-core
// VM, most of it in the iSCSI tests that wait out timeouts);
// RDISK_LIBISCSI_ALL=1 runs the whole suite (--test=ALL, 230 tests in
// libiscsi 1.19, about as long), each test once. RDISK_LIBISCSI_LOG=1 logs
// iscsi-test-cu's output. With RDISK_LIBISCSI_URL=iscsi://HOST:PORT/IQN/LUN
// it runs the same tests against another target (tgt, gotgt, LIO) and
// only reports the counts.
package libiscsi
