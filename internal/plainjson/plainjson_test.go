package plainjson

import (
	"encoding/json"
	"testing"
)

// Each reader on what it takes and on the edges it refuses, and where it
// leaves the scanner.
func TestScanner(t *testing.T) {
	for _, tc := range []struct {
		in   string
		read func(s *Scanner) bool
		ok   bool
		rest string // what is left when ok
	}{
		{`"abc",`, func(s *Scanner) bool { v, ok := s.Str(); return ok && string(v) == "abc" }, true, ","},
		{`""`, func(s *Scanner) bool { v, ok := s.Str(); return ok && len(v) == 0 }, true, ""},
		{`"a\"b\\c\/d\n\u0000\u001F\u003c",`, func(s *Scanner) bool { v, ok := s.Str(); return ok && string(v) == "a\"b\\c/d\n\x00\x1f<" }, true, ","},
		{`"\u00e9"`, func(s *Scanner) bool { _, ok := s.Str(); return ok }, false, ""},
		{`"\x41"`, func(s *Scanner) bool { _, ok := s.Str(); return ok }, false, ""},
		{`"\u00G0"`, func(s *Scanner) bool { _, ok := s.Str(); return ok }, false, ""},
		{`"a\`, func(s *Scanner) bool { _, ok := s.Str(); return ok }, false, ""},
		{`"\u004`, func(s *Scanner) bool { _, ok := s.Str(); return ok }, false, ""},
		{"\"\\n\x01\"", func(s *Scanner) bool { _, ok := s.Str(); return ok }, false, ""},
		{"\"a\x01\"", func(s *Scanner) bool { _, ok := s.Str(); return ok }, false, ""},
		{"\"a\x7f\"", func(s *Scanner) bool { _, ok := s.Str(); return ok }, false, ""},
		{`"é"`, func(s *Scanner) bool { _, ok := s.Str(); return ok }, false, ""},
		{`"open`, func(s *Scanner) bool { _, ok := s.Str(); return ok }, false, ""},
		{`18446744073709551615}`, func(s *Scanner) bool { x, ok := s.Uint(^uint64(0)); return ok && x == ^uint64(0) }, true, "}"},
		{`18446744073709551616`, func(s *Scanner) bool { _, ok := s.Uint(^uint64(0)); return ok }, false, ""},
		{`4294967296`, func(s *Scanner) bool { _, ok := s.Uint(1<<32 - 1); return ok }, false, ""},
		{`0`, func(s *Scanner) bool { x, ok := s.Uint(9); return ok && x == 0 }, true, ""},
		{`01`, func(s *Scanner) bool { _, ok := s.Uint(99); return ok }, false, ""},
		{`1.0`, func(s *Scanner) bool { _, ok := s.Uint(99); return ok }, false, ""},
		{`1e0`, func(s *Scanner) bool { _, ok := s.Uint(99); return ok }, false, ""},
		{`-1`, func(s *Scanner) bool { _, ok := s.Uint(99); return ok }, false, ""},
		{`nullx`, func(s *Scanner) bool { return s.Literal("null") }, true, "x"},
		{`nul`, func(s *Scanner) bool { return s.Literal("null") }, false, ""},
		{`{"a":"1","b":"2"}`, func(s *Scanner) bool {
			var got string
			ok := s.Fields(func(k []byte) bool { v, ok := s.Str(); got += string(k) + "=" + string(v) + ";"; return ok })
			return ok && got == "a=1;b=2;"
		}, true, ""},
		{`{}`, func(s *Scanner) bool { return s.Fields(func([]byte) bool { return false }) }, true, ""},
		{`{"a":"1",}`, func(s *Scanner) bool { return s.Fields(func([]byte) bool { _, ok := s.Str(); return ok }) }, false, ""},
		{`{,"a":"1"}`, func(s *Scanner) bool { return s.Fields(func([]byte) bool { _, ok := s.Str(); return ok }) }, false, ""},
		{`{"a" "1"}`, func(s *Scanner) bool { return s.Fields(func([]byte) bool { _, ok := s.Str(); return ok }) }, false, ""},
		{`{"a":"1"}`, func(s *Scanner) bool { return s.Fields(func([]byte) bool { return false }) }, false, ""},
	} {
		s := &Scanner{B: []byte(tc.in)}
		if got := tc.read(s); got != tc.ok {
			t.Errorf("%q: read %v, want %v", tc.in, got, tc.ok)
		} else if tc.ok && string(s.B[s.I:]) != tc.rest {
			t.Errorf("%q: left %q, want %q", tc.in, s.B[s.I:], tc.rest)
		}
	}
}

// FuzzScannerStr: whatever Str reads, encoding/json reads the same, and
// Str reads every string Writer writes.
func FuzzScannerStr(f *testing.F) {
	for _, s := range []string{`"a"`, `"a\"\u0000\/"`, `"\ud800"`, `"\u00e9"`, `"é"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		s := &Scanner{B: in}
		if v, ok := s.Str(); ok && s.Done() {
			var want string
			if err := json.Unmarshal(in, &want); err != nil {
				t.Fatalf("%q: Str read %q, encoding/json refuses: %v", in, v, err)
			}
			if string(v) != want {
				t.Fatalf("%q: Str read %q, encoding/json %q", in, v, want)
			}
		}
		w := Writer{}
		w.Str(string(in))
		if w.OK() {
			s := &Scanner{B: w.B}
			if v, ok := s.Str(); !ok || !s.Done() || string(v) != string(in) {
				t.Fatalf("%q: written %s, read back %q %v", in, w.B, v, ok)
			}
		}
	})
}
