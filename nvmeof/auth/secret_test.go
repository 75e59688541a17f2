package auth

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// nvmeCLIVector is one "nvme gen-dhchap-key" run recorded in
// testdata/nvme-cli-dhchap-keys.txt, with the check-dhchap-key line after it.
type nvmeCLIVector struct {
	hmac   HashID
	secret []byte
	nqn    string
	out    string // the printed DHHC-1 secret
	check  string // nvme check-dhchap-key's output for it
}

// readNVMeCLIVectors returns the gen-dhchap-key runs and the
// check-dhchap-key runs of keys nvme-cli rejects (key -> message).
func readNVMeCLIVectors(t *testing.T) ([]nvmeCLIVector, map[string]string) {
	t.Helper()
	f, err := os.Open("testdata/nvme-cli-dhchap-keys.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []string
	for sc := bufio.NewScanner(f); sc.Scan(); {
		if l := sc.Text(); !strings.HasPrefix(l, "#") {
			lines = append(lines, l)
		}
	}
	var vs []nvmeCLIVector
	bad := map[string]string{}
	for i := 0; i+1 < len(lines); i++ {
		l := lines[i]
		switch {
		case strings.HasPrefix(l, "$ nvme gen-dhchap-key "):
			v := nvmeCLIVector{out: lines[i+1]}
			for _, a := range strings.Fields(strings.TrimPrefix(l, "$ nvme gen-dhchap-key ")) {
				k, val, _ := strings.Cut(a, "=")
				switch k {
				case "--hmac":
					v.hmac = HashID(val[0] - '0')
				case "--secret":
					if v.secret, err = hex.DecodeString(val); err != nil {
						t.Fatal(err)
					}
				case "--nqn":
					v.nqn = val
				}
			}
			if i+3 < len(lines) && strings.HasPrefix(lines[i+2], "$ nvme check-dhchap-key") {
				v.check = lines[i+3]
			}
			vs = append(vs, v)
		case strings.HasPrefix(l, "$ nvme check-dhchap-key --key=") && !strings.HasPrefix(lines[i+1], "Key is valid"):
			bad[strings.TrimPrefix(l, "$ nvme check-dhchap-key --key=")] = lines[i+1]
		}
	}
	if len(vs) < 6 || len(bad) < 2 {
		t.Fatalf("testdata holds %d vectors and %d rejected keys; want at least 6 and 2", len(vs), len(bad))
	}
	return vs, bad
}

// TestSecretNVMeCLIVectors checks NewSecret (gen-dhchap-key --secret), the
// key transformation (nvme_auth_transform_key, which gen-dhchap-key applies
// at generation), String, ParseSecret and the CRC against nvme-cli 2.3.
func TestSecretNVMeCLIVectors(t *testing.T) {
	vs, _ := readNVMeCLIVectors(t)
	for _, v := range vs {
		t.Run(v.out[:9]+"/"+v.nqn, func(t *testing.T) {
			s, err := NewSecret(v.secret, v.hmac, v.nqn)
			if err != nil {
				t.Fatal(err)
			}
			if got := s.String(); got != v.out {
				t.Errorf("NewSecret(...).String() = %s, nvme-cli printed %s", got, v.out)
			}
			// The transformation alone (what Linux applies at use).
			want := Secret{Transform: v.hmac, Key: v.secret}.TransformedKey(v.nqn)
			if !bytes.Equal(s.Key, want) {
				t.Errorf("key = %x, TransformedKey = %x", s.Key, want)
			}
			p, err := ParseSecret(v.out)
			if err != nil {
				t.Fatalf("ParseSecret(%s): %v", v.out, err)
			}
			if p.Transform != v.hmac || !bytes.Equal(p.Key, s.Key) {
				t.Errorf("ParseSecret = {%s %x}, want {%s %x}", p.Transform, p.Key, v.hmac, s.Key)
			}
			// "Key is valid (HMAC 1, length 32, CRC c809dae5)"
			wantCheck := fmt.Sprintf("Key is valid (HMAC %d, length %d, CRC %08x)", v.hmac, len(p.Key), crc32.ChecksumIEEE(p.Key))
			if v.check != wantCheck {
				t.Errorf("check-dhchap-key said %q, we compute %q", v.check, wantCheck)
			}
			// Without the final ':' (Linux accepts it).
			if _, err := ParseSecret(strings.TrimSuffix(v.out, ":")); err != nil {
				t.Errorf("without final colon: %v", err)
			}
		})
	}
}

// TestParseSecretRejectsWhatNVMeCLIRejects covers the two keys
// check-dhchap-key refused in the recorded run.
func TestParseSecretRejectsWhatNVMeCLIRejects(t *testing.T) {
	_, bad := readNVMeCLIVectors(t)
	for key, msg := range bad {
		_, err := ParseSecret(key)
		if !errors.Is(err, ErrInvalidSecret) {
			t.Errorf("ParseSecret(%s) = %v; nvme-cli: %s", key, err, msg)
			continue
		}
		t.Logf("nvme-cli: %s; we: %v", msg, err)
		if strings.HasPrefix(msg, "CRC mismatch") && !strings.Contains(err.Error(), "CRC-32 mismatch (secret carries 92267e8a, key's CRC-32 is 91267e8a)") {
			t.Errorf("CRC error %q does not give nvme-cli's numbers (%s)", err, msg)
		}
	}
}

func TestParseSecretErrors(t *testing.T) {
	good := "DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:"
	for _, tc := range []struct{ in, want string }{
		{"", `does not start with "DHHC-1:"`},
		{"DHHC-2:00:AAAA:", `does not start with "DHHC-1:"`},
		{" " + good, "white space"},
		{good + "\n", "white space"},
		{"DHHC-1:0:AAAA:", "want two digits"},
		{"DHHC-1:04:" + good[10:], `key transformation "04" unknown`},
		{"DHHC-1:1a:" + good[10:], `key transformation "1a" unknown`},
		{"DHHC-1:00::", "empty key"},
		{"DHHC-1:00:AAECAwQF:BgcI:", "more than one ':'"},
		{"DHHC-1:00:AAEC*wQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:", "not valid base64"},
		{"DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR=:", "not valid base64"},
		{"DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=:", "decodes to 32 bytes; want 36, 52 or 68"},
		{"DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaS:", "CRC-32 mismatch"},
		{"DHHC-1:03:" + good[10:], "a DHHC-1:03 (sha512) secret holds a 64-byte key, this one 32 bytes"},
	} {
		_, err := ParseSecret(tc.in)
		if !errors.Is(err, ErrInvalidSecret) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseSecret(%q) = %v, want an ErrInvalidSecret saying %q", tc.in, err, tc.want)
		}
		if err != nil && len(tc.in) > 20 && strings.Contains(err.Error(), tc.in[10:20]) {
			t.Errorf("error %q quotes the secret", err)
		}
	}
}

func TestGenerateSecret(t *testing.T) {
	nqn := "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-000000000001"
	for _, tc := range []struct {
		hmac   HashID
		keyLen int
		want   int
	}{{HashNone, 0, 32}, {HashNone, 48, 48}, {HashNone, 64, 64}, {HashSHA256, 0, 32}, {HashSHA384, 0, 48}, {HashSHA512, 64, 64}} {
		raw := bytes.Repeat([]byte{7}, 64)
		s, err := GenerateSecret(bytes.NewReader(raw), tc.hmac, tc.keyLen, nqn)
		if err != nil {
			t.Fatalf("GenerateSecret(%s, %d): %v", tc.hmac, tc.keyLen, err)
		}
		if len(s.Key) != tc.want || s.Transform != tc.hmac {
			t.Errorf("GenerateSecret(%s, %d) = {%s, %d bytes}", tc.hmac, tc.keyLen, s.Transform, len(s.Key))
		}
		want, _ := NewSecret(raw[:tc.want], tc.hmac, nqn)
		if !bytes.Equal(s.Key, want.Key) {
			t.Errorf("GenerateSecret(%s) key differs from NewSecret of the same random bytes", tc.hmac)
		}
		if p, err := ParseSecret(s.String()); err != nil || !bytes.Equal(p.Key, s.Key) {
			t.Errorf("round trip of generated secret: %v", err)
		}
	}
	for _, tc := range []struct {
		hmac   HashID
		keyLen int
		nqn    string
	}{{HashSHA256, 48, nqn}, {HashNone, 40, nqn}, {HashSHA384, 0, ""}, {HashID(9), 0, nqn}} {
		if _, err := GenerateSecret(nil, tc.hmac, tc.keyLen, tc.nqn); !errors.Is(err, ErrInvalidSecret) {
			t.Errorf("GenerateSecret(%s, %d, %q) = %v, want ErrInvalidSecret", tc.hmac, tc.keyLen, tc.nqn, err)
		}
	}
	if _, err := GenerateSecret(nil, HashSHA256, 0, nqn); err != nil {
		t.Errorf("GenerateSecret with crypto/rand: %v", err)
	}
}

func TestReadSecretFile(t *testing.T) {
	dir := t.TempDir()
	good := "DHHC-1:01:01AOx7HQYsPat9W5bsruzELYzhOqGedtvtAJEmX6jXDl2gnI:"
	p := filepath.Join(dir, "key")
	if err := os.WriteFile(p, []byte("  "+good+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := ReadSecretFile(p)
	if err != nil || s.String() != good {
		t.Errorf("ReadSecretFile = %v, %v", s, err)
	}
	bad := filepath.Join(dir, "bad")
	os.WriteFile(bad, []byte("DHHC-1:01:01AOx7HQYsPat9W5bsruzELYzhOqGedtvtAJEmX6jXDl2gnJ:\n"), 0o600)
	if _, err := ReadSecretFile(bad); !errors.Is(err, ErrInvalidSecret) || !strings.Contains(err.Error(), bad) {
		t.Errorf("ReadSecretFile(bad) = %v, want ErrInvalidSecret naming the file", err)
	}
	if _, err := ReadSecretFile(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("ReadSecretFile(missing) = %v", err)
	}
}

func TestParseSecretOrFile(t *testing.T) {
	const key = "DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:"
	path := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(path, []byte(key+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := ParseSecretOrFile(key)
	if err != nil {
		t.Fatal(err)
	}
	b, err := ParseSecretOrFile("@" + path)
	if err != nil || b.String() != a.String() {
		t.Fatalf("from a file: %v %v", b, err)
	}
	if _, err := ParseSecretOrFile("@" + path + ".missing"); err == nil {
		t.Fatal("missing file accepted")
	}
}
