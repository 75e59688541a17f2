// Package libiscsi runs libiscsi's conformance suite, iscsi-test-cu (Debian
// package libiscsi-bin), against rdisk's iSCSI/TCP portal with a RAM LUN.
// The test skips when iscsi-test-cu is not installed. With
// RDISK_LIBISCSI_URL=iscsi://HOST:PORT/IQN/LUN it runs the same families
// against another target (tgt, gotgt) and only reports the counts.
package libiscsi
