//go:build ceph && linux && !pacific

package rbd

// The ceph build also needs go-ceph's release tag: build with
// -tags ceph,pacific (Debian 12's Ceph 16 is Pacific).
var _ = build_with_tags_ceph_and_pacific_not_ceph_alone
