// Package plainjson reads and writes JSON as json.Marshal writes it for
// simple values, for the hot paths that skip encoding/json's reflection.
//
// The Scanner reads the plain subset: objects with string keys, strings
// of ASCII, canonical integers, RFC 3339 times, and the literals null,
// true and false, with no white space. It serves host/state's
// restore of plain volumes and host/cluster's decoding of checkpoint log
// entries. Every reader answers false for anything outside the subset,
// leaving the scanner where it was or part-way; the caller then gives up
// and decodes the whole input with encoding/json, so what the fast
// decoders take they must decode exactly as encoding/json does (each has
// a differential fuzz test).
//
// The Writer (writer.go) is the writing half, under the same rule: what
// it does not write byte for byte as json.Marshal does, it refuses.
package plainjson

import (
	"math"
	"time"
)

// Scanner reads B from I.
type Scanner struct {
	B []byte
	I int
}

// Done reports whether the whole input has been read.
func (s *Scanner) Done() bool { return s.I == len(s.B) }

// Byte consumes c when it is next.
func (s *Scanner) Byte(c byte) bool {
	if s.I < len(s.B) && s.B[s.I] == c {
		s.I++
		return true
	}
	return false
}

// Literal consumes lit (null, true or false) when it is next.
func (s *Scanner) Literal(lit string) bool {
	if len(s.B)-s.I >= len(lit) && string(s.B[s.I:s.I+len(lit)]) == lit {
		s.I += len(lit)
		return true
	}
	return false
}

// Str reads a string of ASCII and returns its bytes: printable ASCII
// (0x20-0x7e) as it is, aliasing B, and the escapes json.Marshal writes for
// the rest of ASCII (\" \\ \/ \b \f \n \r \t and \u00XX of a byte below
// 0x80) decoded into a new slice, as encoding/json decodes them. Anything
// else in a string (a raw control character, which encoding/json refuses;
// a byte of a multi-byte character, whose UTF-8 it checks; an escape of
// anything beyond ASCII) is refused.
func (s *Scanner) Str() ([]byte, bool) {
	if !s.Byte('"') {
		return nil, false
	}
	for j := s.I; j < len(s.B); j++ {
		switch c := s.B[j]; {
		case c == '"':
			v := s.B[s.I:j]
			s.I = j + 1
			return v, true
		case c == '\\':
			return s.escaped(j)
		case c < 0x20 || c > 0x7e:
			return nil, false
		}
	}
	return nil, false
}

// StrTo reads a string (Str) into dst, a copy of its bytes.
func (s *Scanner) StrTo(dst *string) bool {
	v, ok := s.Str()
	*dst = string(v)
	return ok
}

// escaped reads the rest of a string from its first escape at j.
func (s *Scanner) escaped(j int) ([]byte, bool) {
	out := append(make([]byte, 0, j-s.I+16), s.B[s.I:j]...)
	for j < len(s.B) {
		c := s.B[j]
		switch {
		case c == '"':
			s.I = j + 1
			return out, true
		case c < 0x20 || c > 0x7e:
			return nil, false
		case c != '\\':
			out = append(out, c)
			j++
			continue
		}
		if j+1 >= len(s.B) {
			return nil, false
		}
		switch e := s.B[j+1]; e {
		case '"', '\\', '/':
			out = append(out, e)
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			if j+6 > len(s.B) {
				return nil, false
			}
			r, ok := hex4(s.B[j+2 : j+6])
			if !ok || r >= 0x80 {
				return nil, false
			}
			out = append(out, byte(r))
			j += 4
		default:
			return nil, false
		}
		j += 2
	}
	return nil, false
}

func hex4(b []byte) (rune, bool) {
	var r rune
	for _, c := range b {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// Uint reads a non-negative integer of at most limit in canonical form: no
// sign, no leading zero, and no fraction or exponent after it (encoding/json
// refuses them for an integer field).
func (s *Scanner) Uint(limit uint64) (uint64, bool) {
	start := s.I
	var x uint64
	for s.I < len(s.B) && '0' <= s.B[s.I] && s.B[s.I] <= '9' {
		d := uint64(s.B[s.I] - '0')
		if x > (limit-d)/10 {
			return 0, false // out of the field's range: encoding/json errs
		}
		x = x*10 + d
		s.I++
	}
	if n := s.I - start; n == 0 || n > 1 && s.B[start] == '0' {
		return 0, false
	}
	if s.I < len(s.B) {
		if c := s.B[s.I]; c == '.' || c == 'e' || c == 'E' {
			return 0, false
		}
	}
	return x, true
}

// Fields reads an object, calling field for each key with the scanner at
// the key's value; field reads the value and answers false to refuse the
// object.
func (s *Scanner) Fields(field func(k []byte) bool) bool {
	if !s.Byte('{') {
		return false
	}
	for n := 0; ; n++ {
		if s.Byte('}') {
			return true
		}
		if n > 0 && !s.Byte(',') {
			return false
		}
		k, ok := s.Str()
		if !ok || !s.Byte(':') || !field(k) {
			return false
		}
	}
}

// Int reads an integer of the range of int in canonical form (Uint's,
// after an optional minus sign).
func (s *Scanner) Int() (int, bool) {
	if s.Byte('-') {
		x, ok := s.Uint(uint64(math.MaxInt) + 1)
		return int(-int64(x)), ok // -(MaxInt+1) wraps to itself: MinInt
	}
	x, ok := s.Uint(math.MaxInt)
	return int(x), ok
}

// Bool reads true or false.
func (s *Scanner) Bool() (v, ok bool) {
	switch {
	case s.Literal("true"):
		return true, true
	case s.Literal("false"):
		return false, true
	}
	return false, false
}

// Time reads a string and hands it, quotes included, to
// time.Time.UnmarshalJSON, as encoding/json does.
func (s *Scanner) Time(dst *time.Time) bool {
	start := s.I
	if _, ok := s.Str(); !ok {
		return false
	}
	return dst.UnmarshalJSON(s.B[start:s.I]) == nil
}

// StringMap reads null (a nil map) or an object of strings. A repeated
// key is kept as encoding/json keeps it (the last value wins), and {} is
// an empty map, not nil, as encoding/json makes it.
func (s *Scanner) StringMap() (map[string]string, bool) {
	if s.Literal("null") {
		return nil, true
	}
	m := map[string]string{}
	ok := s.Fields(func(k []byte) bool {
		v, ok := s.Str()
		m[string(k)] = string(v)
		return ok
	})
	return m, ok
}

// Strings reads null (a nil slice) or an array of strings ([] is an
// empty slice, not nil, as encoding/json makes it).
func (s *Scanner) Strings() ([]string, bool) {
	if s.Literal("null") {
		return nil, true
	}
	if !s.Byte('[') {
		return nil, false
	}
	out := []string{}
	for !s.Byte(']') {
		if len(out) > 0 && !s.Byte(',') {
			return nil, false
		}
		v, ok := s.Str()
		if !ok {
			return nil, false
		}
		out = append(out, string(v))
	}
	return out, true
}

// Object reads null (a nil *T, as encoding/json leaves a pointer field)
// or an object into a new T, handing field each key with the scanner at
// its value. field reads the value and answers the key's bit (its place
// in T, below 64) and whether it read it: a key it does not know is
// refused, and so is a key whose bit was seen before in the object
// (encoding/json applies a repeated key again, merging into a pointer it
// already set, which this does not reproduce). A refused object is left
// to encoding/json, whose case folding and skipping of unknown keys then
// decide.
func Object[T any](s *Scanner, field func(v *T, k []byte) (bit uint, ok bool)) (*T, bool) {
	if s.Literal("null") {
		return nil, true
	}
	v := new(T)
	var seen uint64
	if !s.Fields(func(k []byte) bool {
		bit, ok := field(v, k)
		if !ok || seen&(1<<bit) != 0 {
			return false
		}
		seen |= 1 << bit
		return true
	}) {
		return nil, false
	}
	return v, true
}
