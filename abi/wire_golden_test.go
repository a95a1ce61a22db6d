package abi

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// The wire pinned byte for byte. testdata/wire/golden.txt holds, for every
// message and variants of it (long strings, large and negative numbers,
// fields cleared), its encoding; and for every fuzz seed decoded as every
// message, what the decode gives (re-encoded) or its error. The hand-written
// codec wrote the file, and the generated one was compared with it on these
// and on fuzzed inputs before it was removed; a change to the
// generator (or to volhost.proto) that changes the wire fails here.
// Regenerate only for an intended wire change:
//
//	go test ./abi -run TestWireGolden -update-wire-golden
var updateWireGolden = flag.Bool("update-wire-golden", false, "rewrite testdata/wire/golden.txt")

const wireGoldenPath = "testdata/wire/golden.txt"

// wireCodec is one implementation of the wire, driven through the
// generated types: encode a message, and decode bytes as the message
// called name and encode the result again.
type wireCodec struct {
	encode func(m Message) []byte
	decode func(name string, b []byte) ([]byte, error)
}

var generatedCodec = wireCodec{
	encode: func(m Message) []byte { return m.MarshalAppend(nil) },
	decode: func(name string, b []byte) ([]byte, error) {
		m := newMessage(name)
		if err := m.Unmarshal(b); err != nil {
			return nil, err
		}
		return m.MarshalAppend(nil), nil
	},
}

// newMessage is a zero message of the type called name.
func newMessage(name string) Message {
	return reflect.New(reflect.TypeOf(full()[name]).Elem()).Interface().(Message)
}

func TestWireGolden(t *testing.T) {
	got := strings.Join(wireLines(t, generatedCodec), "\n") + "\n"
	if *updateWireGolden {
		if err := os.MkdirAll(filepath.Dir(wireGoldenPath), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(wireGoldenPath, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(wireGoldenPath)
	if err != nil {
		t.Fatal(err)
	}
	gl, wl := strings.Split(got, "\n"), strings.Split(string(want), "\n")
	for i := 0; i < len(gl) || i < len(wl); i++ {
		var g, w string
		if i < len(gl) {
			g = gl[i]
		}
		if i < len(wl) {
			w = wl[i]
		}
		if g != w {
			t.Fatalf("%s line %d:\n got %q\nwant %q", wireGoldenPath, i+1, g, w)
		}
	}
}

// wireLines is the golden file's content under codec c.
func wireLines(t *testing.T, c wireCodec) []string {
	t.Helper()
	var out []string
	msgs := full()
	names := make([]string, 0, len(msgs))
	for name := range msgs {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		for _, v := range wireVariants(msgs[name]) {
			b := c.encode(v.m)
			out = append(out, fmt.Sprintf("encode %s/%s %s", name, v.label, wireText(b)))
			// The same bytes decoded, and with unknown fields in front of
			// every body (the general loop instead of the fast path).
			out = append(out, decodeLine(c, name, v.label, b))
			out = append(out, decodeLine(c, name, v.label+"+unknown", withUnknownFields(name, b)))
		}
	}
	seeds, err := filepath.Glob("testdata/fuzz/Fuzz*/*")
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(seeds)
	for _, path := range seeds {
		b := readSeed(t, path)
		for _, name := range names {
			out = append(out, decodeLine(c, name, strings.TrimPrefix(path, "testdata/fuzz/"), b))
		}
	}
	return out
}

func decodeLine(c wireCodec, name, label string, b []byte) string {
	re, err := c.decode(name, b)
	if err != nil {
		// protowire's errors say "proto:" with a space or, by a hash of
		// the test binary, a no-break space (so that nobody depends on
		// their text): the golden file has the space.
		return fmt.Sprintf("decode %s %s error %s", name, label, strings.ReplaceAll(err.Error(), "proto:\u00a0", "proto: "))
	}
	return fmt.Sprintf("decode %s %s %s", name, label, wireText(re))
}

// wireText is b in hex, or for more than 128 bytes its length and SHA-256
// (the file stays small; a difference still shows).
func wireText(b []byte) string {
	if len(b) <= 128 {
		return hex.EncodeToString(b)
	}
	return fmt.Sprintf("%d bytes sha256:%x", len(b), sha256.Sum256(b))
}

// readSeed reads a `go test fuzz v1` file holding one []byte.
func readSeed(t *testing.T, path string) []byte {
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, lit, ok := bytes.Cut(raw, []byte("\n[]byte("))
	if !ok {
		t.Fatalf("%s: not a []byte seed", path)
	}
	s, err := strconv.Unquote(string(bytes.TrimSuffix(bytes.TrimSpace(lit), []byte(")"))))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return []byte(s)
}

type wireVariant struct {
	label string
	m     Message
}

// wireVariants are m and copies of it that take each encoder's other
// forms: strings at and over the one-byte length (127, 128, 300 bytes),
// varints of several bytes and negative int64s, and every other field
// cleared (the fast paths pass over absent fields).
func wireVariants(m Message) []wireVariant {
	v := reflect.ValueOf(m).Elem()
	str := func(n int) func(reflect.Value) reflect.Value {
		return func(x reflect.Value) reflect.Value {
			if x.Kind() != reflect.String || x.Len() == 0 {
				return x
			}
			s := strings.Repeat(x.String(), n/x.Len()+1)[:n]
			return reflect.ValueOf(s).Convert(x.Type())
		}
	}
	num := func(big bool) func(reflect.Value) reflect.Value {
		return func(x reflect.Value) reflect.Value {
			y := reflect.New(x.Type()).Elem()
			switch x.Kind() {
			case reflect.Int64:
				if big {
					y.SetInt(x.Int() + 1<<40)
				} else {
					y.SetInt(-x.Int() - 1)
				}
				return y
			case reflect.Uint32:
				if big {
					y.SetUint(x.Uint() + 1<<31)
				} else {
					y.SetUint(x.Uint() + 200)
				}
				return y
			}
			return x
		}
	}
	out := []wireVariant{{"as-is", m}}
	for _, c := range []struct {
		label string
		fn    func(reflect.Value) reflect.Value
	}{
		{"str127", str(127)}, {"str128", str(128)}, {"str300", str(300)},
		{"big", num(true)}, {"neg-or-200", num(false)},
	} {
		out = append(out, wireVariant{c.label, transform(v, c.fn).Addr().Interface().(Message)})
	}
	for parity := range 2 {
		c := transform(v, func(x reflect.Value) reflect.Value { return x })
		for i := parity; i < c.NumField(); i += 2 {
			c.Field(i).SetZero()
		}
		out = append(out, wireVariant{fmt.Sprintf("cleared%d", parity), c.Addr().Interface().(Message)})
	}
	return out
}

// transform returns an addressable deep copy of v with fn applied to every
// scalar (strings, numbers, map keys and values).
func transform(v reflect.Value, fn func(reflect.Value) reflect.Value) reflect.Value {
	out := reflect.New(v.Type()).Elem()
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			out.Field(i).Set(transform(v.Field(i), fn))
		}
	case reflect.Slice:
		if v.IsNil() {
			return out
		}
		out.Set(reflect.MakeSlice(v.Type(), v.Len(), v.Len()))
		for i := range v.Len() {
			out.Index(i).Set(transform(v.Index(i), fn))
		}
	case reflect.Map:
		if v.IsNil() {
			return out
		}
		out.Set(reflect.MakeMap(v.Type()))
		for _, k := range v.MapKeys() {
			out.SetMapIndex(transform(k, fn), transform(v.MapIndex(k), fn))
		}
	default:
		out.Set(fn(v))
	}
	return out
}
