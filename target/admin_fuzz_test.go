package target

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/rdisk/rdisk/backstore"
)

// FuzzAdmin sends fuzzed requests to the admin socket's handler of a
// running target: no panic, every answer is JSON with 200, 400, 404 or
// 405, and the model stays valid (what Parse would accept).
func FuzzAdmin(f *testing.F) {
	for _, s := range []struct{ m, path, body string }{
		{"GET", "/v1/status", ""},
		{"POST", "/v1/subsystems/" + nqnA + "/namespaces", `{"nsid": 9, "enable": 1, "device": {"path": "ram:1MiB"}}`},
		{"POST", "/v1/subsystems/" + nqnA + "/namespaces/2/resize", `{"size": "4MiB"}`},
		{"DELETE", "/v1/subsystems/" + nqnB, ""},
		{"POST", "/v1/ports", `{"portid": 3, "addr": {"trtype": "tcp", "traddr": "127.0.0.1", "trsvcid": "0"}, "subsystems": ["` + nqnA + `"]}`},
		{"POST", "/v1/ports/1/disable", ""},
		{"POST", "/v1/iscsi/targets/iqn.2026-12.io.rdisk:t/luns", `{"lun": 4, "subsystem": "` + nqnA + `", "nsid": 2}`},
		{"PUT", "/v1/iscsi/targets/iqn.2026-12.io.rdisk:t/acls/iqn.x", `{"mapped_luns": [{"mapped_lun": 1, "lun": 0}]}`},
		{"PUT", "/v1/config", applyAfter},
		{"GET", "/v1/config?format=nvmetcli", ""},
	} {
		f.Add(s.m, s.path, []byte(s.body))
	}
	p := newIWARP(f)
	f.Fuzz(func(t *testing.T, method, path string, body []byte) {
		if !strings.HasPrefix(path, "/") || strings.ContainsAny(path, " \r\n\t") || len(body) > 1<<16 {
			return
		}
		c, err := Parse(strings.NewReader(applyBefore))
		if err != nil {
			t.Fatal(err)
		}
		// RAM and null disks only, loopback listeners only.
		c.OpenDevice = func(path string, o DeviceOptions) (backstore.Disk, error) {
			if !strings.HasPrefix(path, "ram:") && !strings.HasPrefix(path, "null:") {
				return nil, fmt.Errorf("fuzz: %s: only RAM and null disks", path)
			}
			return OpenDevice(path, o)
		}
		run, err := Start(c, p, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer run.Close()
		h := run.AdminHandler(nil, nil)
		req, err := http.NewRequest(method, "http://rdisk"+path, bytes.NewReader(body))
		if err != nil {
			return
		}
		if !loopbackOnly(body) {
			return // a port on another address would listen there
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		switch w.Code {
		case 200, 400, 404, 405, 301, 307, 308: // the mux redirects uncleaned paths
		default:
			t.Fatalf("%s %s: status %d: %s", method, path, w.Code, w.Body)
		}
		if w.Code != 405 && !json.Valid(w.Body.Bytes()) && w.Body.Len() > 0 && !strings.HasPrefix(w.Body.String(), "404 page not found") {
			t.Fatalf("%s %s: not JSON: %q", method, path, w.Body)
		}
		if err := run.Config().validate(&positions{}); err != nil {
			t.Fatalf("%s %s left an invalid model: %v", method, path, err)
		}
	})
}

// loopbackOnly tells whether every "traddr" in a JSON body is a loopback
// address (or the body is not JSON: it is refused then).
func loopbackOnly(body []byte) bool {
	var v any
	if json.Unmarshal(body, &v) != nil {
		return true
	}
	ok := true
	var walk func(any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				if s, isStr := e.(string); k == "traddr" && (!isStr || !IsLoopback(s)) {
					ok = false
				}
				walk(e)
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	walk(v)
	return ok
}
