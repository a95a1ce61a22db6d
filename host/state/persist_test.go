package state

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/internal/plainjson"
	"github.com/volhost/volhost/internal/testutil"
)

var update = flag.Bool("update", false, "rewrite testdata golden files")

type bytesBuffer = bytes.Buffer

// richFixture has something in every table: claims at several states, a
// stuck volume, leftovers and events.
func richFixture(t testing.TB) *fixture {
	f := newFixture(t)
	f.claim("vol-mw", "a1", structs.ClaimWrite)
	f.claim("vol-mw", "a2", structs.ClaimWrite)
	f.claim("vol-sw", "a5", structs.ClaimWrite)
	f.claim("vol-ro", "a2", structs.ClaimRead)
	f.setAlloc("a5", structs.AllocComplete)
	if err := f.checkpoint("vol-sw", "a5", structs.ClaimNodeDetached); err != nil {
		t.Fatal(err)
	}
	f.must(structs.VolumeStuckType, &structs.VolumeStuckRequest{Namespace: "default", VolumeID: "vol-sw",
		Stuck: &structs.Stuck{Reason: "controller keeps failing", Attempts: 7, Code: 13, CodeName: "Internal"}})
	f.setAlloc("a1", structs.AllocComplete)
	f.setAlloc("a2", structs.AllocFailed)
	f.must(structs.VolumeDeregisterType, &structs.VolumeDeregisterRequest{Namespace: "default", VolumeID: "vol-mw", Force: true})
	f.must(structs.EventAppendType, &structs.EventAppendRequest{Events: []*structs.Event{{Type: structs.EventModule, Module: "m", Message: "loaded", Fields: map[string]string{"v": "1"}}}})
	return f
}

func TestPersistRestoreRoundTrip(t *testing.T) {
	f := richFixture(t)
	addACL(f) // the ACL tables round-trip too (kept out of the golden file's fixture)
	addScheduler(f)
	var buf bytes.Buffer
	if err := f.s.Persist(&buf); err != nil {
		t.Fatal(err)
	}
	s2 := NewStore()
	if err := s2.Restore(bytes.NewReader(buf.Bytes())); err != nil {
		t.Fatal(err)
	}
	d2, err := s2.Digest()
	if err != nil {
		t.Fatal(err)
	}
	if d2 != f.digest() {
		t.Fatal("digest changed across persist/restore")
	}
	if s2.LatestIndex() != f.s.LatestIndex() || s2.LatestIndex() != f.idx {
		t.Fatalf("latest index %d after restore, want %d", s2.LatestIndex(), f.idx)
	}
	a, b := f.s.Snapshot(), s2.Snapshot()
	va, _ := a.Volumes(nil)
	vb, _ := b.Volumes(nil)
	if len(va) != 4 || len(vb) != 4 {
		t.Fatalf("volumes %d/%d", len(va), len(vb))
	}
	for i := range va {
		ca, cb := va[i].Claims, vb[i].Claims
		if len(ca) != len(cb) {
			t.Fatalf("%s: %d claims vs %d", va[i].ID, len(ca), len(cb))
		}
		for id, c := range ca {
			if !c.CreateTime.Equal(cb[id].CreateTime) || c.State != cb[id].State || c.ModifyIndex != cb[id].ModifyIndex {
				t.Fatalf("%s/%s: claim %+v restored as %+v", va[i].ID, id, c, cb[id])
			}
		}
	}
	for _, table := range persistTables[1:] { // the index table has no index of its own
		ia, _ := a.Index(table)
		ib, _ := b.Index(table)
		if ia != ib || ia == 0 {
			t.Errorf("index of %s: %d vs %d", table, ia, ib)
		}
	}
	// The restored store keeps working: indexes, events and claims.
	f2 := &fixture{t: t, s: s2, clk: f.clk, idx: f.idx}
	if err := f2.checkpoint("vol-sw", "a5", structs.ClaimReadyToFree); err != nil {
		t.Fatal(err)
	}
	if v := f2.volume("default", "vol-sw"); v.Claims != nil || v.Stuck != nil {
		t.Fatalf("after restore: %+v", v)
	}
	evA, _ := a.Events(nil, 0)
	evB, _ := f2.s.Snapshot().Events(nil, 0)
	if len(evB) != len(evA)+1 {
		t.Fatalf("events %d after one more write, want %d", len(evB), len(evA)+1)
	}
}

// The snapshot format is pinned by a golden file: raft snapshots written by
// one binary are restored by the next. persist-v1.jsonl was written before
// event rings existed; restored, its events land in the rings the writer
// gives them, so it persists back to today's golden.
func TestPersistGolden(t *testing.T) {
	f := richFixture(t)
	var buf bytes.Buffer
	if err := f.s.Persist(&buf); err != nil {
		t.Fatal(err)
	}
	const golden = "testdata/persist-v1-rings.jsonl"
	if *update {
		if err := os.WriteFile(golden, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(buf.Bytes(), want) {
		t.Fatalf("persist output differs from %s (run with -update if the change is intended)", golden)
	}
	for _, in := range []string{golden, "testdata/persist-v1.jsonl"} {
		raw, err := os.ReadFile(in)
		if err != nil {
			t.Fatal(err)
		}
		s2 := NewStore()
		if err := s2.Restore(bytes.NewReader(raw)); err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		var again bytes.Buffer
		if err := s2.Persist(&again); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(again.Bytes(), want) {
			t.Fatalf("restore of %s does not persist back to %s", in, golden)
		}
	}
}

// A bad stream is refused with an error and leaves the state as it was.
func TestRestoreBadStream(t *testing.T) {
	f := richFixture(t)
	var good bytes.Buffer
	if err := f.s.Persist(&good); err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(good.String(), "\n")
	tests := []struct {
		name, stream, want string
	}{
		{"empty", "", "header"},
		{"wrong version", `{"volhost_state":9}` + "\n", "version 9"},
		{"unknown table", lines[0] + `{"t":"jobs","r":{}}` + "\n", `unknown table "jobs"`},
		{"bad row", lines[0] + `{"t":"volumes","r":{"id":5}}` + "\n", "decode volumes row"},
		{"truncated", good.String()[:good.Len()-20], "row"},
		{"event without body", lines[0] + `{"t":"events","r":{"seq":1}}` + "\n", "no event"},
		{"invalid volume", lines[0] + `{"t":"volumes","r":{"id":"x"}}` + "\n", "row 2 (volumes /x): volumes[0].namespace: must not be empty"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := NewStore()
			if err := s.Restore(bytes.NewReader(good.Bytes())); err != nil {
				t.Fatal(err)
			}
			before, _ := s.Digest()
			err := s.Restore(strings.NewReader(tc.stream))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
			if after, _ := s.Digest(); after != before {
				t.Fatal("failed restore changed the state")
			}
		})
	}
}

func TestDigestTracksState(t *testing.T) {
	f := newFixture(t)
	d1 := f.digest()
	if d1 != f.digest() {
		t.Fatal("digest not stable")
	}
	f.claim("vol-mw", "a1", structs.ClaimRead)
	if f.digest() == d1 {
		t.Fatal("digest did not change after a write")
	}
	g := newFixture(t)
	g.claim("vol-mw", "a1", structs.ClaimRead)
	if !reflect.DeepEqual(f.digest(), g.digest()) {
		t.Fatal("same writes at same indexes gave different digests")
	}
}

// Persist writes each row as json.Marshal writes it, whichever writer it
// takes (a row's AppendJSON, or encoding/json for every other table and
// for a string AppendJSON leaves to it): the stream is the one every
// earlier binary wrote and reads back.
func TestPersistRowsAreJSONMarshal(t *testing.T) {
	f := richFixture(t)
	addACL(f)
	addScheduler(f)
	f.must(structs.VolumeRegisterType, &structs.VolumeRegisterRequest{Volumes: []*structs.Volume{
		{Namespace: "default", ID: "vol-escaped", ExternalID: `disk<"1">&`, PluginID: "ebs", AccessMode: structs.AccessSingleNodeWriter,
			AttachmentMode: structs.AttachFilesystem, Parameters: map[string]string{"zone": "zürich", "tab": "a\tb"}},
	}})
	f.must(structs.EventAppendType, &structs.EventAppendRequest{Events: []*structs.Event{
		{Type: structs.EventModule, Module: "m", Message: "naïve <module>"},
	}})
	var got bytes.Buffer
	if err := f.s.Persist(&got); err != nil {
		t.Fatal(err)
	}
	snap := f.s.Snapshot()
	want := bytes.NewBufferString(`{"volhost_state":1}` + "\n")
	for _, table := range persistTables {
		it, err := snap.txn.Get(table, indexID)
		if err != nil {
			t.Fatal(err)
		}
		for raw := it.Next(); raw != nil; raw = it.Next() {
			// The bytes alone would match with every row left to
			// encoding/json: the growing tables' rows must take the
			// fast writer (marshal's jsonAppender).
			if _, fast := raw.(jsonAppender); !fast && (table == TableVolumes || table == TableAllocs || table == TableEvents) {
				t.Fatalf("a %s row (%T) does not write its own JSON", table, raw)
			}
			row, err := json.Marshal(persistRow{Table: table, Row: mustJSON(t, raw)})
			if err != nil {
				t.Fatal(err)
			}
			want.Write(row)
			want.WriteByte('\n')
		}
	}
	if got.String() != want.String() {
		t.Fatalf("Persist wrote\n%s\njson.Marshal of each row\n%s", got.String(), want.String())
	}
	for _, s := range []string{`\u003c\"1\"\u003e\u0026`, "zürich", `a\tb`, "naïve", `"ring":"v\u0000default\u0000`} {
		if !strings.Contains(got.String(), s) {
			t.Errorf("the stream has no %s: the case it is for is gone", s)
		}
	}
	// An event row with every field set.
	row := &eventRow{}
	testutil.Fill(reflect.ValueOf(row).Elem(), t0)
	w := plainjson.Writer{}
	row.AppendJSON(&w)
	if want := mustJSON(t, row); !w.OK() || string(w.B) != string(want) {
		t.Fatalf("eventRow.AppendJSON wrote %s (ok %v), json.Marshal %s", w.B, w.OK(), want)
	}
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
