//go:build linux

package backstore

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

func TestOpenSpec(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, tt := range []struct {
		spec    Spec
		wantErr string
		check   func(t *testing.T, d Disk)
	}{
		{spec: Spec{Kind: KindMem, Size: 1 << 20}, check: func(t *testing.T, d Disk) {
			if _, ok := d.(*Mem); !ok || d.BlockSize() != 512 || d.Size() != 1<<20 || d.ReadOnly() {
				t.Errorf("mem: %T %d %d %v", d, d.BlockSize(), d.Size(), d.ReadOnly())
			}
		}},
		{spec: Spec{Kind: KindMem, Size: 1 << 20, BlockSize: 4096, ReadOnly: true}, check: func(t *testing.T, d Disk) {
			if d.BlockSize() != 4096 || !d.ReadOnly() {
				t.Errorf("read-only mem: %d %v", d.BlockSize(), d.ReadOnly())
			}
		}},
		{spec: Spec{Kind: KindNull, Size: 1 << 20, ReadOnly: true}, check: func(t *testing.T, d Disk) {
			if _, ok := d.(*Null); !ok || !d.ReadOnly() {
				t.Errorf("null: %T %v", d, d.ReadOnly())
			}
		}},
		{spec: Spec{Kind: KindFile, Path: filepath.Join(dir, "f.img"), Create: true, Size: 1 << 20, BlockSize: 4096}, check: func(t *testing.T, d Disk) {
			if f, ok := d.(*File); !ok || f.Size() != 1<<20 || f.BlockSize() != 4096 {
				t.Errorf("file: %T", d)
			}
		}},
		{spec: Spec{Kind: KindMem}, wantErr: "size 0"},
		{spec: Spec{Kind: KindNull, Size: 1000}, wantErr: "not a positive multiple"},
		{spec: Spec{Kind: KindNull, Size: 4096, BlockSize: 3}, wantErr: "neither 512 nor 4096"},
		{spec: Spec{Kind: KindFile, Path: filepath.Join(dir, "missing")}, wantErr: "no such file"},
		{spec: Spec{Kind: KindBlock, Path: filepath.Join(dir, "missing")}, wantErr: "no such file"},
		{spec: Spec{Kind: "tape"}, wantErr: "unknown kind"},
	} {
		d, err := Open(tt.spec)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Open(%+v): %v, want %q", tt.spec, err, tt.wantErr)
			}
			if d != nil {
				d.Close()
			}
			continue
		}
		if err != nil {
			t.Errorf("Open(%+v): %v", tt.spec, err)
			continue
		}
		tt.check(t, d)
		d.Close()
	}
}

func TestSpecJSON(t *testing.T) {
	t.Parallel()
	var s Spec
	in := `{"kind":"file","path":"/srv/disk.img","size":1073741824,"block_size":4096,"create":true,"direct":true}`
	if err := json.Unmarshal([]byte(in), &s); err != nil {
		t.Fatal(err)
	}
	want := Spec{Kind: KindFile, Path: "/srv/disk.img", Size: 1 << 30, BlockSize: 4096, Create: true, Direct: true}
	if s != want {
		t.Errorf("decoded %+v, want %+v", s, want)
	}
}
