package plainjson

import (
	"encoding/json"
	"testing"
	"time"
)

// checkStr fails when Str writes other bytes than json.Marshal without
// refusing; it reports whether it wrote s.
func checkStr(t *testing.T, s string) bool {
	t.Helper()
	w := Writer{B: []byte("x")}
	w.Str(s)
	if !w.OK() {
		return false
	}
	want, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	if string(w.B) != "x"+string(want) {
		t.Fatalf("Str(%q) wrote %s, json.Marshal %s", s, w.B[1:], want)
	}
	return true
}

func TestWriterStr(t *testing.T) {
	for _, tc := range []struct {
		in string
		ok bool
	}{
		{"", true}, {"plain-ID_1.2/3:4", true}, {`q"b\s`, true}, {"<a>&", true},
		{"\n\r\t", true}, {"\x00\x01\x1f", true}, {"ring v\x00default\x00vol-1", true},
		{"\b", false}, {"\f", false}, {"\x7f", false}, {"é", false}, {"\u2028", false}, {"\xff", false},
	} {
		if got := checkStr(t, tc.in); got != tc.ok {
			t.Errorf("Str(%q): wrote %v, want %v", tc.in, got, tc.ok)
		}
	}
	// A refusal sticks: one refused string refuses the whole value.
	w := Writer{}
	w.Str("é")
	w.Str("ok")
	if w.OK() {
		t.Fatal("a refused string was forgotten")
	}
}

func TestWriterObject(t *testing.T) {
	at := time.Date(2026, 12, 6, 3, 0, 0, 5, time.FixedZone("", 3600))
	w := Writer{}
	w.Open()
	w.Optional("skipped", "")
	w.Field("a", "1")
	w.Flag("off", false)
	w.Flag("on", true)
	w.Strings("none", nil)
	w.Strings("list", []string{"x", "y"})
	w.StringMap("empty", map[string]string{})
	w.StringMap("m", map[string]string{"b": "2", "a": "1", "B": ""})
	w.Key("t")
	w.Time(at)
	w.Key("u")
	w.Uint(1<<64 - 1)
	w.Key("i")
	w.Int(-1 << 63)
	w.Key("o")
	w.Open()
	w.Close()
	w.Close()
	want, _ := json.Marshal(struct {
		Skipped string            `json:"skipped,omitempty"`
		A       string            `json:"a"`
		Off     bool              `json:"off,omitempty"`
		On      bool              `json:"on,omitempty"`
		None    []string          `json:"none,omitempty"`
		List    []string          `json:"list,omitempty"`
		Empty   map[string]string `json:"empty,omitempty"`
		M       map[string]string `json:"m,omitempty"`
		T       time.Time         `json:"t"`
		U       uint64            `json:"u"`
		I       int64             `json:"i"`
		O       struct{}          `json:"o"`
	}{A: "1", On: true, List: []string{"x", "y"}, Empty: map[string]string{}, M: map[string]string{"b": "2", "a": "1", "B": ""},
		T: at, U: 1<<64 - 1, I: -1 << 63})
	if !w.OK() || string(w.B) != string(want) {
		t.Fatalf("wrote %s (ok %v), json.Marshal %s", w.B, w.OK(), want)
	}
	w = Writer{}
	w.Time(time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC))
	if w.OK() {
		t.Fatal("a year json.Marshal refuses was written")
	}
}

// FuzzWriterStr: whatever Str writes, json.Marshal writes the same.
func FuzzWriterStr(f *testing.F) {
	for _, s := range []string{"", "a", "\x00<\"\\>&\n", "é", "\b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) { checkStr(t, s) })
}
