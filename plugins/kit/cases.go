package kit

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
)

// Case is one case file: a view, and what the module must answer to it.
//
//	{
//	  "name": "a completed allocation is released",
//	  "view": {"policy": {"now_unix_ms": 1700000000000, "volume": {...}, "claims": [...], ...}},
//	  "expect": {"decisions": [{"alloc_id": "a1", "action": "release"}]}
//	}
//
// expect matches partially, like OPA's test assertions on objects: every
// field it names must be in the answer with that value, fields it leaves out
// are not compared; lists must have the same length and match element by
// element. A field the answer leaves at its zero value matches an expected
// zero ("", 0, false, [], {}). expect_fault instead names the fault kind the
// call must end in (trap, timeout, unsafe, bad-output, guest-error, ...).
type Case struct {
	Name        string          `json:"name,omitempty"`
	View        View            `json:"view"`
	Expect      json.RawMessage `json:"expect,omitempty"`
	ExpectFault string          `json:"expect_fault,omitempty"`

	// File is where the case was read from.
	File string `json:"-"`
}

// maxCaseFile bounds a case file: a view of a volume with a few hundred
// claims is tens of kilobytes.
const maxCaseFile = 4 << 20

// ParseCase decodes and checks one case file's contents; name is the file
// (for messages and as the default case name).
func ParseCase(name string, b []byte) (*Case, error) {
	if len(b) > maxCaseFile {
		return nil, fmt.Errorf("case %s: %d bytes, over the %d-byte bound", name, len(b), maxCaseFile)
	}
	if len(bytes.TrimSpace(b)) == 0 {
		// Typically `module record ... > cases/x.json` that failed: the
		// shell made the file before the command said why. "EOF" alone
		// named neither the file nor the fix.
		return nil, fmt.Errorf("case %s is empty: record one with volhost module record -o FILE VOLUME (a volume with claims), or delete it", name)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var c Case
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("case %s: %w", name, jsonError(b, err))
	}
	if dec.More() {
		return nil, fmt.Errorf("case %s: more than one JSON value (one case per file)", name)
	}
	if _, err := c.View.Call(); err != nil {
		return nil, fmt.Errorf("case %s: %w", name, err)
	}
	hasExpect := len(c.Expect) > 0 && string(c.Expect) != "null"
	switch {
	case hasExpect && c.ExpectFault != "":
		return nil, fmt.Errorf("case %s: both \"expect\" and \"expect_fault\": a case expects an answer or a fault", name)
	case !hasExpect && c.ExpectFault == "":
		return nil, fmt.Errorf("case %s: neither \"expect\" nor \"expect_fault\": say what the module must answer", name)
	case hasExpect:
		var obj map[string]any
		if err := json.Unmarshal(c.Expect, &obj); err != nil {
			return nil, fmt.Errorf("case %s: \"expect\" must be an object of answer fields: %w", name, err)
		}
		if err := checkAnswerFields(obj); err != nil {
			return nil, fmt.Errorf("case %s: %w", name, err)
		}
	}
	c.File = name
	if c.Name == "" {
		c.Name = strings.TrimSuffix(filepath.Base(name), filepath.Ext(name))
	}
	return &c, nil
}

// checkAnswerFields refuses an expectation naming a field no answer has: a
// typo would otherwise never be compared, and the case pass vacuously.
func checkAnswerFields(obj map[string]any) error {
	known := map[string]bool{}
	t := reflect.TypeOf(Answer{})
	for i := range t.NumField() {
		n, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		known[n] = true
	}
	for k := range obj {
		if !known[k] {
			return fmt.Errorf("\"expect\" names %q, which no answer has (known: %s)", k, strings.Join(slices.Sorted(mapKeys(known)), ", "))
		}
	}
	if ds, ok := obj["decisions"].([]any); ok {
		for i, d := range ds {
			m, ok := d.(map[string]any)
			if !ok {
				return fmt.Errorf("\"expect\".decisions[%d] is not an object", i)
			}
			for k := range m {
				switch k {
				case "alloc_id", "action", "retry_after_ms", "reason":
				default:
					return fmt.Errorf("\"expect\".decisions[%d] names %q, which a decision does not have (alloc_id, action, retry_after_ms, reason)", i, k)
				}
			}
		}
	}
	return nil
}

func mapKeys[K comparable, V any](m map[K]V) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// jsonError adds the line and column to a syntax or type error.
func jsonError(b []byte, err error) error {
	var off int64 = -1
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		off = se.Offset
	case errors.As(err, &te):
		off = te.Offset
	}
	if off < 0 || off > int64(len(b)) {
		return err
	}
	line := 1 + bytes.Count(b[:off], []byte("\n"))
	col := off - int64(bytes.LastIndexByte(b[:off], '\n'))
	return fmt.Errorf("line %d, column %d: %w", line, col, err)
}

// LoadCases reads every *.json case file of dir, sorted by name. A
// malformed file is an error naming it: a case that cannot be read must not
// silently not run.
func LoadCases(dir string) ([]*Case, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("cases: %w", err)
	}
	var out []*Case
	for _, e := range entries {
		if e.IsDir() || filepath.Ext(e.Name()) != ".json" {
			continue
		}
		path := filepath.Join(dir, e.Name())
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("case %s: %w", path, err)
		}
		c, err := ParseCase(path, b)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("cases: no *.json case files in %s", dir)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].File < out[j].File })
	return out, nil
}

// Match compares an answer with a case's partial expectation and returns
// one line per difference (none: it matches).
func Match(expect json.RawMessage, got *Answer) []string {
	var want any
	if err := json.Unmarshal(expect, &want); err != nil {
		return []string{fmt.Sprintf("expect: %v", err)}
	}
	var have any
	if got != nil {
		b, _ := json.Marshal(got)
		_ = json.Unmarshal(b, &have)
	}
	var diffs []string
	matchValue("", want, have, &diffs)
	return diffs
}

func matchValue(path string, want, have any, diffs *[]string) {
	if have == nil && isZero(want) {
		return
	}
	switch w := want.(type) {
	case map[string]any:
		h, ok := have.(map[string]any)
		if !ok {
			*diffs = append(*diffs, fmt.Sprintf("%s: want an object %s, got %s", orRoot(path), show(w), show(have)))
			return
		}
		for _, k := range slices.Sorted(mapKeys(w)) {
			matchValue(join(path, k), w[k], h[k], diffs)
		}
	case []any:
		h, ok := have.([]any)
		if !ok {
			*diffs = append(*diffs, fmt.Sprintf("%s: want a list %s, got %s", orRoot(path), show(w), show(have)))
			return
		}
		if len(w) != len(h) {
			*diffs = append(*diffs, fmt.Sprintf("%s: want %d elements %s, got %d %s", orRoot(path), len(w), show(w), len(h), show(h)))
			return
		}
		for i := range w {
			matchValue(fmt.Sprintf("%s[%d]", path, i), w[i], h[i], diffs)
		}
	default:
		if !reflect.DeepEqual(want, have) {
			*diffs = append(*diffs, fmt.Sprintf("%s: want %s, got %s", orRoot(path), show(want), show(have)))
		}
	}
}

func isZero(v any) bool {
	switch w := v.(type) {
	case nil:
		return true
	case string:
		return w == ""
	case float64:
		return w == 0
	case bool:
		return !w
	case []any:
		return len(w) == 0
	case map[string]any:
		return len(w) == 0
	}
	return false
}

func join(path, k string) string {
	if path == "" {
		return k
	}
	return path + "." + k
}

func orRoot(path string) string {
	if path == "" {
		return "answer"
	}
	return path
}

func show(v any) string {
	if v == nil {
		return "nothing"
	}
	b, _ := json.Marshal(v)
	return string(b)
}
