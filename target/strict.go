package target

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
)

// Strict reading of a configuration: before the JSON is decoded, every key
// is checked against the Config structs' json tags and every value against
// its field's kind, so a misspelt key ("namespace" for "namespaces") or a
// string where a number belongs is refused with its line and path instead
// of being dropped. The positions are kept for the checks Parse makes
// afterwards (duplicates, dangling references).

// ConfigError is a configuration error at a place in the file.
type ConfigError struct {
	// Line is the 1-based line of the offending key or value (0: none).
	Line int
	// Path is the field's path, e.g. subsystems[0].namespaces[1].nsid.
	Path string
	Err  error
}

func (e *ConfigError) Error() string {
	switch {
	case e.Line > 0 && e.Path != "":
		return fmt.Sprintf("line %d: %s: %v", e.Line, e.Path, e.Err)
	case e.Path != "":
		return fmt.Sprintf("%s: %v", e.Path, e.Err)
	}
	return e.Err.Error()
}

func (e *ConfigError) Unwrap() error { return e.Err }

// positions maps a path to the byte offset of its key (or value, for array
// elements).
type positions struct {
	data []byte
	off  map[string]int64
}

// line returns the line of path, or 0.
func (p *positions) line(path string) int {
	o, ok := p.off[path]
	if !ok {
		return 0
	}
	// The offset is where the decoder stood before the token: skip the
	// white space and separators in front of it.
	for o < int64(len(p.data)) && strings.IndexByte(" \t\r\n,:", p.data[o]) >= 0 {
		o++
	}
	return bytes.Count(p.data[:min(o, int64(len(p.data)))], []byte{'\n'}) + 1
}

// errAt returns a ConfigError at path.
func (p *positions) errAt(path string, format string, args ...any) *ConfigError {
	return &ConfigError{Line: p.line(path), Path: path, Err: fmt.Errorf(format, args...)}
}

// checkSchema walks data against the type of v (a pointer to a struct).
func checkSchema(data []byte, v any) (*positions, error) {
	p := &positions{data: data, off: map[string]int64{}}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := p.walk(dec, reflect.TypeOf(v).Elem(), ""); err != nil {
		return p, err
	}
	if _, err := dec.Token(); err == nil {
		return p, &ConfigError{Line: p.lineAt(dec.InputOffset()), Err: errors.New("data after the configuration object")}
	}
	return p, nil
}

func (p *positions) lineAt(off int64) int {
	return bytes.Count(p.data[:min(off, int64(len(p.data)))], []byte{'\n'}) + 1
}

// syntaxErr turns a decoder error into a ConfigError with a line.
func (p *positions) syntaxErr(dec *json.Decoder, path string, err error) error {
	var se *json.SyntaxError
	off := dec.InputOffset()
	if errors.As(err, &se) {
		off = se.Offset
	}
	return &ConfigError{Line: p.lineAt(off), Path: path, Err: fmt.Errorf("invalid JSON: %w", err)}
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// walk reads one value of type t at path.
func (p *positions) walk(dec *json.Decoder, t reflect.Type, path string) error {
	start := dec.InputOffset()
	if _, seen := p.off[path]; !seen {
		p.off[path] = start
	}
	tok, err := dec.Token()
	if err != nil {
		return p.syntaxErr(dec, path, err)
	}
	if tok == nil && (t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map || t.Kind() == reflect.Interface) {
		return nil
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	want := func(what string) error {
		return p.errAt(path, "want %s, got %s", what, describe(tok))
	}
	switch t.Kind() {
	case reflect.Interface:
		return p.skip(dec, tok, path)
	case reflect.Struct:
		if tok != json.Delim('{') {
			return want("an object")
		}
		fields := jsonFields(t)
		for dec.More() {
			koff := dec.InputOffset()
			kt, err := dec.Token()
			if err != nil {
				return p.syntaxErr(dec, path, err)
			}
			key := kt.(string)
			kp := join(path, key)
			p.off[kp] = koff
			f, ok := fields[key]
			if !ok {
				return p.errAt(kp, "unknown key %q (known here: %s)", key, strings.Join(sortedKeys(fields), ", "))
			}
			if err := p.walk(dec, f.Type, kp); err != nil {
				return err
			}
		}
		return p.closing(dec, path)
	case reflect.Map:
		if tok != json.Delim('{') {
			return want("an object")
		}
		for dec.More() {
			koff := dec.InputOffset()
			kt, err := dec.Token()
			if err != nil {
				return p.syntaxErr(dec, path, err)
			}
			kp := join(path, kt.(string))
			p.off[kp] = koff
			if err := p.walk(dec, t.Elem(), kp); err != nil {
				return err
			}
		}
		return p.closing(dec, path)
	case reflect.Slice:
		if tok != json.Delim('[') {
			return want("a list")
		}
		for i := 0; dec.More(); i++ {
			if err := p.walk(dec, t.Elem(), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
		return p.closing(dec, path)
	case reflect.String:
		if _, ok := tok.(string); !ok {
			return want("a string")
		}
	case reflect.Bool:
		if _, ok := tok.(bool); !ok {
			return want("true or false")
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		n, ok := tok.(json.Number)
		if !ok {
			return want("a whole number")
		}
		bits := t.Bits()
		var err error
		if t.Kind() >= reflect.Uint && t.Kind() <= reflect.Uint64 {
			_, err = strconv.ParseUint(string(n), 10, bits)
		} else {
			_, err = strconv.ParseInt(string(n), 10, bits)
		}
		if err != nil {
			return p.errAt(path, "%s is not a whole number that fits (%s)", n, t.Kind())
		}
	}
	return nil
}

// closing reads the end of an object or list.
func (p *positions) closing(dec *json.Decoder, path string) error {
	if _, err := dec.Token(); err != nil {
		return p.syntaxErr(dec, path, err)
	}
	return nil
}

// skip consumes the rest of a value whose first token was tok.
func (p *positions) skip(dec *json.Decoder, tok json.Token, path string) error {
	if d, ok := tok.(json.Delim); ok && (d == '{' || d == '[') {
		for depth := 1; depth > 0; {
			t, err := dec.Token()
			if err != nil {
				return p.syntaxErr(dec, path, err)
			}
			switch t {
			case json.Delim('{'), json.Delim('['):
				depth++
			case json.Delim('}'), json.Delim(']'):
				depth--
			}
		}
	}
	return nil
}

func describe(tok json.Token) string {
	switch v := tok.(type) {
	case json.Delim:
		if v == '{' {
			return "an object"
		}
		return "a list"
	case string:
		return fmt.Sprintf("the string %q", v)
	case json.Number:
		return "the number " + string(v)
	case bool:
		return strconv.FormatBool(v)
	case nil:
		return "null"
	}
	return fmt.Sprint(tok)
}

// jsonFields maps a struct's JSON keys to its fields.
func jsonFields(t reflect.Type) map[string]reflect.StructField {
	m := map[string]reflect.StructField{}
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		name, _, _ := strings.Cut(tag, ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		m[name] = f
	}
	return m
}

func sortedKeys(m map[string]reflect.StructField) []string {
	return slices.Sorted(maps.Keys(m))
}
