package plainjson

import (
	"maps"
	"slices"
	"strconv"
	"time"
)

// Writer appends JSON as json.Marshal writes it, for objects of strings
// of ASCII, integers, booleans and times: the writers that skip
// encoding/json's reflection on a hot path (host/structs' AppendJSON
// methods: a raft snapshot's volumes and the leader's checkpoint entries)
// are built from it. A value it would not write byte for byte as
// json.Marshal does (a string json.Marshal escapes or checks, a time it
// refuses) marks the Writer refused instead; the caller then drops what
// was appended and marshals the value with encoding/json.
type Writer struct {
	B       []byte
	refused bool
	// first is true between an object's brace and its first key, so Key
	// knows whether a comma goes before it (omitempty fields leave any
	// of them first).
	first bool
}

// OK reports whether everything written so far is what json.Marshal
// writes.
func (w *Writer) OK() bool { return !w.refused }

// Raw appends s as it is.
func (w *Writer) Raw(s string) { w.B = append(w.B, s...) }

// Open starts an object and Close ends it.
func (w *Writer) Open()  { w.B, w.first = append(w.B, '{'), true }
func (w *Writer) Close() { w.B, w.first = append(w.B, '}'), false }

// Key writes "k": after a comma, unless it is its object's first. k is a
// struct tag's name: plain, never escaped.
func (w *Writer) Key(k string) {
	if !w.first {
		w.B = append(w.B, ',')
	}
	w.first = false
	w.B = append(w.B, '"')
	w.B = append(w.B, k...)
	w.B = append(w.B, '"', ':')
}

// Str writes a string of ASCII as json.Marshal does, escapes included: a
// quote and a backslash after a backslash, \n, \r and \t as such, and
// the other control characters and the HTML characters <, > and & as
// \u00XX (HTML escaping is on in json.Marshal and json.Encoder by
// default). A string with \b or \f (which Go 1.22 began writing short),
// DEL or anything beyond ASCII (whose UTF-8 json.Marshal checks, and
// whose U+2028 and U+2029 it escapes) is refused.
func (w *Writer) Str(s string) {
	w.B = append(w.B, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c < 0x7f && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
			continue
		}
		if c >= 0x7f || c == '\b' || c == '\f' {
			w.refused = true
			return
		}
		w.B = append(w.B, s[start:i]...)
		switch c {
		case '"', '\\':
			w.B = append(w.B, '\\', c)
		case '\n':
			w.B = append(w.B, '\\', 'n')
		case '\r':
			w.B = append(w.B, '\\', 'r')
		case '\t':
			w.B = append(w.B, '\\', 't')
		default:
			w.B = append(w.B, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		}
		start = i + 1
	}
	w.B = append(w.B, s[start:]...)
	w.B = append(w.B, '"')
}

const hexDigits = "0123456789abcdef"

// Time writes what time.Time.MarshalJSON does (both write the time's
// strict RFC 3339 form, quoted here), without its buffer per time.
func (w *Writer) Time(t time.Time) {
	b, err := t.AppendText(append(w.B, '"'))
	if err != nil {
		w.refused = true // json.Marshal reports it
		return
	}
	w.B = append(b, '"')
}

// Uint and Int write an integer.
func (w *Writer) Uint(x uint64) { w.B = strconv.AppendUint(w.B, x, 10) }
func (w *Writer) Int(x int64)   { w.B = strconv.AppendInt(w.B, x, 10) }

// Flag writes "k":true for an omitempty boolean that is set.
func (w *Writer) Flag(k string, v bool) {
	if v {
		w.Key(k)
		w.Raw("true")
	}
}

// Field writes "k":"v" for a string field json.Marshal always writes.
func (w *Writer) Field(k, v string) {
	w.Key(k)
	w.Str(v)
}

// Optional writes an omitempty string that is set.
func (w *Writer) Optional(k, v string) {
	if v != "" {
		w.Field(k, v)
	}
}

// Strings writes an omitempty []string that has elements.
func (w *Writer) Strings(k string, v []string) {
	if len(v) == 0 {
		return
	}
	w.Key(k)
	for i, s := range v {
		if i == 0 {
			w.Raw("[")
		} else {
			w.Raw(",")
		}
		w.Str(s)
	}
	w.Raw("]")
}

// StringMap writes an omitempty map[string]string that has entries.
func (w *Writer) StringMap(k string, m map[string]string) { Map(w, k, m, w.Str) }

// Map writes an omitempty map with string keys that has entries, each
// value by value, its keys sorted as json.Marshal sorts them (by their
// bytes).
func Map[V any](w *Writer, k string, m map[string]V, value func(V)) {
	if len(m) == 0 {
		return
	}
	w.Key(k)
	for i, key := range slices.Sorted(maps.Keys(m)) {
		if i == 0 {
			w.Raw("{")
		} else {
			w.Raw(",")
		}
		w.Str(key)
		w.Raw(":")
		value(m[key])
	}
	w.Raw("}")
}
