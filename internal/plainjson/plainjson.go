// Package plainjson reads and writes JSON as json.Marshal writes it for
// simple values, for the hot paths that skip encoding/json's reflection.
//
// The Scanner reads the plain subset: objects with string keys, strings
// of printable ASCII with no escape, canonical unsigned integers, and the
// literals null, true and false, with no white space. It serves host/state's
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

// Str reads a string of printable ASCII (0x20-0x7e) without escapes and
// returns its bytes, which alias B. Anything else in a string (an escape,
// a control character, a byte of a multi-byte character, whose UTF-8
// encoding/json would check) is refused.
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
		case c < 0x20 || c > 0x7e || c == '\\':
			return nil, false
		}
	}
	return nil, false
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
