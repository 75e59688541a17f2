package units

import "testing"

func TestParseSize(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]int64{"4096": 4096, "4k": 4096, "4KiB": 4096, "128K": 128 << 10, "1MiB": 1 << 20,
		"1g": 1 << 30, "1.5GiB": 3 << 29, "64B": 64, " 2 M ": 2 << 20, "0": 0} {
		got, err := ParseSize(in)
		if err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "k", "-1", "1.5", "12X", "1e400", "NaN", "9999999P"} {
		if _, err := ParseSize(bad); err == nil {
			t.Errorf("ParseSize(%q) succeeded", bad)
		}
	}
}

func TestFormat(t *testing.T) {
	t.Parallel()
	if got := FormatSize(128 << 10); got != "128KiB" {
		t.Errorf("FormatSize = %q", got)
	}
	if got := FormatSize(3 << 29); got != "1.5GiB" {
		t.Errorf("FormatSize = %q", got)
	}
	if got := FormatRate(2.5e9); got != "2.50 GB/s" {
		t.Errorf("FormatRate = %q", got)
	}
}

func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"4k", "1.5GiB", "", "x", "1e9"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if v, err := ParseSize(s); err == nil && v < 0 {
			t.Fatalf("ParseSize(%q) = %d", s, v)
		}
	})
}
