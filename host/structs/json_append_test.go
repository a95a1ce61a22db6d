package structs

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/volhost/volhost/internal/plainjson"
	"github.com/volhost/volhost/internal/testutil"
)

type jsonAppender interface{ AppendJSON(*plainjson.Writer) }

// checkAppendJSON fails when v's AppendJSON writes other bytes than
// json.Marshal without refusing; it reports whether it wrote v.
func checkAppendJSON(t *testing.T, v jsonAppender) bool {
	t.Helper()
	w := plainjson.Writer{B: []byte("prefix")}
	v.AppendJSON(&w)
	if !w.OK() {
		return false
	}
	want, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("%T: AppendJSON wrote what json.Marshal refuses (%v): %s", v, err, w.B)
	}
	if got := string(w.B); got != "prefix"+string(want) {
		t.Fatalf("%T: AppendJSON wrote\n%s\njson.Marshal\n%s", v, got[len("prefix"):], want)
	}
	return true
}

func filled[T any](now time.Time) *T {
	v := new(T)
	testutil.Fill(reflect.ValueOf(v).Elem(), now)
	return v
}

// Every field of every type set, none set, and the shapes a store holds:
// written as json.Marshal writes them. A field added to one of these types
// without its line in AppendJSON fails here.
func TestAppendJSON(t *testing.T) {
	now := time.Date(2026, 12, 6, 2, 40, 7, 120000000, time.UTC)
	zone := now.In(time.FixedZone("", -5*3600)).Truncate(time.Second)
	claim := &Claim{AllocID: "a1", NodeID: "n1", Mode: ClaimWrite, AccessMode: AccessSingleNodeWriter,
		AttachmentMode: AttachFilesystem, State: ClaimTaken, PublishContext: map[string]string{"z": "1", "a": "", "m": "3"},
		CreateTime: zone, ModifyTime: now, CreateIndex: 4, ModifyIndex: 1 << 63, Attempts: -2}
	for _, v := range []jsonAppender{
		filled[Volume](now), filled[Claim](now), filled[ClaimError](now), filled[ClaimHold](now), filled[Stuck](now),
		filled[Alloc](now), filled[Event](now),
		&Volume{}, &Claim{}, &ClaimError{}, &ClaimHold{}, &Stuck{}, &Alloc{}, &Event{},
		(*Volume)(nil), (*Claim)(nil), (*ClaimError)(nil), (*ClaimHold)(nil), (*Stuck)(nil), (*Alloc)(nil), (*Event)(nil),
		&Volume{Namespace: "default", ID: "v1", ExternalID: "disk-1", PluginID: "gcepd", AccessMode: AccessSingleNodeWriter,
			AttachmentMode: AttachFilesystem, CreateIndex: 10, ModifyIndex: 12},
		&Volume{ID: "v2", MountFlags: []string{"ro", "noatime"}, Secrets: map[string]string{"b": "2", "a": "1"},
			Claims: map[string]*Claim{"a2": claim, "a1": claim, "a0": nil}, Stuck: &Stuck{Reason: "r", Code: 0}},
		&Volume{ID: "v3", MountFlags: []string{}, Parameters: map[string]string{}, Claims: map[string]*Claim{}},
		&Stuck{Since: now, Code: 5, CodeName: "NotFound", Attempts: 3},
		&ClaimHold{Since: now, Until: now.Add(time.Hour)},
		// What json.Marshal escapes, in every place a string goes.
		&Volume{Namespace: `n"s`, ID: `v\1`, Name: "a <b> & c", ExternalID: "tab\tnl\ncr\r", PluginID: "nul\x00us\x1f",
			MountFlags: []string{"<", "\x01"}, Context: map[string]string{"&k": "\"v\"", "\x00": ""},
			Claims: map[string]*Claim{`a"1`: {AllocID: `a"1`, PublishContext: map[string]string{">": "<"}}}},
		&Event{Type: "t", Message: "ring v\x00default\x00vol-1", Fields: map[string]string{"e": "x<y"}},
	} {
		if !checkAppendJSON(t, v) {
			t.Errorf("%T %+v: refused", v, v)
		}
	}
}

// What json.Marshal writes differently by Go version (\b, \f), checks
// (anything beyond ASCII) or cannot write is refused:
// the caller marshals it with encoding/json.
func TestAppendJSONRefuses(t *testing.T) {
	base := func() *Volume {
		return &Volume{Namespace: "default", ID: "v1", Claims: map[string]*Claim{"a1": {AllocID: "a1",
			LastError: &ClaimError{Message: "m"}, Hold: &ClaimHold{Reason: "r"}}}, Stuck: &Stuck{Reason: "r"}}
	}
	for name, mangle := range map[string]func(v *Volume){
		"backspace":      func(v *Volume) { v.Claims["a1"].LastError.Message = "a\bc" },
		"form feed":      func(v *Volume) { v.Claims["a1"].NodeID = "n\f1" },
		"delete":         func(v *Volume) { v.FSType = "x\x7f" },
		"non-ASCII":      func(v *Volume) { v.Name = "tä" },
		"line separator": func(v *Volume) { v.Stuck.Reason = "r\u2028" },
		"invalid UTF-8":  func(v *Volume) { v.Namespace = "n\xff" },
		"mount flag":     func(v *Volume) { v.MountFlags = []string{"ok", "é"} },
		"map key":        func(v *Volume) { v.Context = map[string]string{"\b": "v"} },
		"map value":      func(v *Volume) { v.Secrets = map[string]string{"k": "\x80"} },
		"claim key":      func(v *Volume) { v.Claims["a\u2029"] = nil },
		"hold":           func(v *Volume) { v.Claims["a1"].Hold.Module = "m\f" },
		"year 10000":     func(v *Volume) { v.Claims["a1"].ModifyTime = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC) },
		"negative year":  func(v *Volume) { v.Stuck.Since = time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC) },
	} {
		v := base()
		if !checkAppendJSON(t, v) {
			t.Fatalf("%s: the base volume is refused", name)
		}
		mangle(v)
		if checkAppendJSON(t, v) {
			t.Errorf("%s: written by AppendJSON, want it left to json.Marshal", name)
		}
	}
}

// FuzzVolumeAppendJSON: whatever AppendJSON writes, json.Marshal writes
// the same, for volumes built from any strings, numbers and times.
func FuzzVolumeAppendJSON(f *testing.F) {
	f.Add("default", "v1", "/dev/x", "csi", int64(-3), uint64(9), int64(1764766836461637716), 3600, true)
	f.Add("n\"", "<v>", "", "", int64(0), uint64(0), int64(-62135596800000000), 0, false)
	f.Fuzz(func(t *testing.T, ns, id, dev, kind string, attempts int64, index uint64, unixNano int64, zone int, flag bool) {
		at := time.Unix(0, unixNano).In(time.FixedZone("", zone%(24*3600)))
		c := &Claim{AllocID: id, NodeID: ns, State: ClaimState(kind), Attempts: int(attempts),
			PublishContext: map[string]string{dev: id, kind: ns}, ExternalNodeID: dev, CreateTime: at, ModifyIndex: index,
			SkipNodeStep: flag, NodeUnpublished: flag}
		v := &Volume{Namespace: ns, ID: id, Name: kind, ExternalID: dev, MountFlags: []string{kind, dev},
			Parameters: map[string]string{id: dev}, Claims: map[string]*Claim{id: c, dev: nil}, CreateIndex: index}
		if flag {
			c.LastError = &ClaimError{Kind: ErrorKind(kind), Code: uint32(index), Message: dev, Fatal: flag, Time: at}
			c.Hold = &ClaimHold{Reason: dev, Since: at}
			v.Stuck = &Stuck{Since: at, Reason: kind, Code: uint32(attempts), Attempts: int(attempts)}
		}
		checkAppendJSON(t, v)
	})
}

// Every type read back from what json.Marshal writes, every field set:
// Read*JSON take it and give what json.Unmarshal gives. A field added to
// a type without its case in its reader fails here.
func TestReadJSON(t *testing.T) {
	now := time.Date(2026, 12, 6, 2, 40, 7, 120000000, time.FixedZone("", 3600))
	check := func(v any, read func(s *plainjson.Scanner) (any, bool), fresh func() any) {
		t.Helper()
		raw, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		s := plainjson.Scanner{B: raw}
		got, ok := read(&s)
		if !ok || !s.Done() {
			t.Fatalf("%T %s: not read", v, raw)
		}
		want := fresh()
		if err := json.Unmarshal(raw, want); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: read\n%+v\njson.Unmarshal\n%+v", raw, got, want)
		}
	}
	check(filled[Claim](now), func(s *plainjson.Scanner) (any, bool) { return ReadClaimJSON(s) }, func() any { return &Claim{} })
	check(filled[ClaimError](now), func(s *plainjson.Scanner) (any, bool) { return ReadClaimErrorJSON(s) }, func() any { return &ClaimError{} })
	check(filled[ClaimHold](now), func(s *plainjson.Scanner) (any, bool) { return ReadClaimHoldJSON(s) }, func() any { return &ClaimHold{} })
	check(filled[Stuck](now), func(s *plainjson.Scanner) (any, bool) { return ReadStuckJSON(s) }, func() any { return &Stuck{} })
	check(filled[Alloc](now), func(s *plainjson.Scanner) (any, bool) { return ReadAllocJSON(s) }, func() any { return &Alloc{} })
	check(filled[Event](now), func(s *plainjson.Scanner) (any, bool) { return ReadEventJSON(s) }, func() any { return &Event{} })
}
