package jsonindent

import (
	"bytes"
	"encoding/json"
	"testing"
)

func indent(t testing.TB, src string) string {
	t.Helper()
	var b bytes.Buffer
	if err := json.Indent(&b, []byte(src), "", "  "); err != nil {
		t.Fatalf("json.Indent(%q): %v", src, err)
	}
	return b.String()
}

// Each shape compact JSON takes, against json.Indent.
func TestAppendMatchesIndent(t *testing.T) {
	for _, src := range []string{
		`{}`, `[]`, `null`, `"a"`, `12`, `-1.5e3`, `true`,
		`{"a":1}`, `[1,2,3]`, `{"a":{},"b":[],"c":[{}],"d":[[]]}`,
		`{"a":{"b":{"c":[1,{"d":null}]}}}`,
		`{"s":"a,b:c{d}[e]"}`, `{"q":"say \"hi\", {x}"}`, `{"b":"back\\\\","c":"\\"}`,
		`{"u":"\u003c\u2028é"}`, `[{"index":1,"fields":{"state":"taken"}},{"index":2}]`,
		`{"a":"x"}` + "\n",
		"{ \"a\" : [ 1 , 2 ] }", "[\n1\n]",
	} {
		got := string(Append(nil, []byte(src), "  "))
		if want := indent(t, src); got != want {
			t.Errorf("Append(%q) =\n%s\nwant (json.Indent)\n%s", src, got, want)
		}
	}
}

// Append keeps what dst held.
func TestAppendKeepsDst(t *testing.T) {
	got := string(Append([]byte("x"), []byte(`{"a":[1]}`), "\t"))
	if want := "x{\n\t\"a\": [\n\t\t1\n\t]\n}"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

// FuzzAppendMatchesIndent: for every value encoding/json writes, Append
// writes what json.Indent writes; for anything else it does not panic.
func FuzzAppendMatchesIndent(f *testing.F) {
	for _, s := range []string{`{"a":[1,{"b":"c\"d"}],"e":{}}`, `[[],[{}]]`, `"\\"`, "{ }"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		got := Append(nil, src, "  ")
		var v any
		if json.Unmarshal(src, &v) != nil {
			return
		}
		var b bytes.Buffer
		if err := json.Indent(&b, src, "", "  "); err != nil {
			t.Fatalf("json.Indent(%q): %v", src, err)
		}
		if !bytes.Equal(got, b.Bytes()) {
			t.Fatalf("Append(%q) = %q, json.Indent %q", src, got, b.Bytes())
		}
		// And what encoding/json itself writes for the value.
		enc, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		b.Reset()
		_ = json.Indent(&b, enc, "", "  ")
		if got := Append(nil, enc, "  "); !bytes.Equal(got, b.Bytes()) {
			t.Fatalf("Append(%q) = %q, json.Indent %q", enc, got, b.Bytes())
		}
	})
}
