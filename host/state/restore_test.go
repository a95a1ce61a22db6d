package state

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"unsafe"

	"github.com/volhost/volhost/host/structs"
)

// A stream of several decode batches round-trips exactly, counters
// included, and a bad row deep in it (in a later batch than the first) is
// refused naming its line, leaving the store as it was.
func TestRestorePipeline(t *testing.T) {
	src := bulkLoad(t, scaleShape{volumes: 3000, claimed: 300, releasable: 30})
	var good bytes.Buffer
	if err := src.Persist(&good); err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(good.String(), "\n")
	if len(lines) < 4*restoreBatchLines {
		t.Fatalf("only %d lines: the test wants several batches", len(lines))
	}
	want, _ := src.Digest()
	wantStats, _ := src.Snapshot().VolumeStats()

	s := NewStore()
	if err := s.Restore(bytes.NewReader(good.Bytes())); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Digest(); got != want {
		t.Fatal("digest changed across persist/restore")
	}
	// Strings repeated row after row are shared, not one copy per row.
	vols, _ := s.Snapshot().Volumes(nil)
	if a, b := vols[0], vols[1]; unsafe.StringData(a.Namespace) != unsafe.StringData(b.Namespace) ||
		unsafe.StringData(string(a.AccessMode)) != unsafe.StringData(string(b.AccessMode)) {
		t.Error("restored volumes hold their own copies of the namespace and access mode")
	}
	if st, _ := s.Snapshot().VolumeStats(); st.Volumes != wantStats.Volumes || st.Claims[structs.ClaimTaken] != wantStats.Claims[structs.ClaimTaken] {
		t.Fatalf("restored stats %+v, want %+v", st, wantStats)
	}

	late := 3*restoreBatchLines + 7 // 1-based line number of the bad row
	replace := func(line int, with string) string {
		l := append([]string(nil), lines...)
		l[line-1] = with
		return strings.Join(l, "")
	}
	volRow := lines[late-1]
	if !strings.HasPrefix(volRow, `{"t":"volumes"`) {
		t.Fatalf("line %d is not a volume: %s", late, volRow)
	}
	tests := []struct{ name, stream, want string }{
		{"bad row late", replace(late, `{"t":"volumes","r":{"id":5}}`+"\n"), fmt.Sprintf("row %d: decode volumes row", late)},
		{"not json late", replace(late, "{\"t\":\n"), fmt.Sprintf("row %d:", late)},
		{"unknown table late", replace(late, `{"t":"jobs","r":{}}`+"\n"), fmt.Sprintf(`row %d: unknown table "jobs"`, late)},
		{"truncated late", good.String()[:len(strings.Join(lines[:late], ""))-10], fmt.Sprintf("row %d:", late)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := s.Restore(strings.NewReader(tc.stream))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
			if got, _ := s.Digest(); got != want {
				t.Fatal("failed restore changed the state")
			}
		})
	}
}

// Lines Persist does not write but JSON allows (keys in another order,
// spaces, blank lines, no final newline) restore to the same state as the
// canonical ones: the one-pass decode is only a shortcut.
func TestRestoreLineShapes(t *testing.T) {
	f := richFixture(t)
	var good bytes.Buffer
	if err := f.s.Persist(&good); err != nil {
		t.Fatal(err)
	}
	var odd strings.Builder
	for i, line := range strings.Split(strings.TrimSuffix(good.String(), "\n"), "\n") {
		table, row, ok := splitPersistRow([]byte(line))
		switch {
		case i == 0:
			odd.WriteString(line + "\n\n")
		case !ok:
			t.Fatalf("Persist wrote a line the fast path does not take: %s", line)
		case i%2 == 0:
			fmt.Fprintf(&odd, "{ \"r\" : %s , \"t\" : %q }\n", row, table)
		default:
			fmt.Fprintf(&odd, "  %s  \n", line)
		}
	}
	s := NewStore()
	if err := s.Restore(strings.NewReader(strings.TrimSuffix(odd.String(), "\n"))); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Digest(); got != f.digest() {
		t.Fatal("the same rows in other line shapes restored to another state")
	}
}

func TestSplitPersistRow(t *testing.T) {
	for _, tc := range []struct {
		line, table, row string
		ok               bool
	}{
		{`{"t":"volumes","r":{"id":"a"}}`, TableVolumes, `{"id":"a"}`, true},
		{`{"t":"events","r":{}}` + " \r", TableEvents, `{}`, true},
		{`{"t":"jobs","r":{}}`, "", "", false},                                       // not a persisted table
		{`{"r":{},"t":"volumes"}`, "", "", false},                                    // another key order: general path
		{`{"t":"volumes","r":{}`, TableVolumes, `{`, true},                           // no closing brace: decodeRow refuses the row
		{`{"t":"volumes", "r":{}}`, "", "", false},                                   // spacing: general path
		{`{"t":"vol\"umes","r":{}}`, "", "", false},                                  // escapes: general path
		{`{"t":"volumes","r":{},"t":"nodes"}`, TableVolumes, `{},"t":"nodes"`, true}, // decodeRow refuses the row
	} {
		table, row, ok := splitPersistRow([]byte(tc.line))
		if table != tc.table || string(row) != tc.row || ok != tc.ok {
			t.Errorf("%s: got (%q, %q, %v), want (%q, %q, %v)", tc.line, table, row, ok, tc.table, tc.row, tc.ok)
		}
	}
	// The last case, through decodeLine: the general path reads it as JSON
	// does (the last "t" wins) rather than the shortcut guessing.
	table, obj, _, err := decodeLine([]byte(`{"t":"volumes","r":{"key":"k","value":1},"t":"index"}`), newInterner())
	if err != nil || table != TableIndex {
		t.Fatalf("got %q %T %v, want an index row", table, obj, err)
	}
}

// A plugin's volumes come from the external index's plugin prefix: a
// plugin whose ID extends another's is not mixed in, and the order is by
// namespace and ID.
func TestVolumesByPluginPrefix(t *testing.T) {
	s := NewStore()
	idx := uint64(0)
	apply := func(mt structs.MessageType, req any) {
		idx++
		if _, err := s.ApplyAt(idx, t0, mt, req); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"ebs", "ebs2"} {
		apply(structs.PluginUpsertType, &structs.PluginUpsertRequest{Plugin: &structs.Plugin{ID: id, Provider: id + ".csi"}})
	}
	vol := func(ns, id, plugin, ext string) *structs.Volume {
		return &structs.Volume{Namespace: ns, ID: id, ExternalID: ext, PluginID: plugin,
			AccessMode: structs.AccessSingleNodeWriter, AttachmentMode: structs.AttachFilesystem}
	}
	apply(structs.VolumeRegisterType, &structs.VolumeRegisterRequest{Volumes: []*structs.Volume{
		vol("default", "b", "ebs", "disk-1"), vol("default", "a", "ebs", "disk-2"), vol("alpha", "z", "ebs", "disk-0"),
		vol("default", "c", "ebs2", "disk-3"),
	}})
	for _, tc := range []struct {
		plugin string
		want   []string
	}{{"ebs", []string{"alpha/z", "default/a", "default/b"}}, {"ebs2", []string{"default/c"}}, {"eb", nil}} {
		vols, err := s.Snapshot().VolumesByPlugin(nil, tc.plugin)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, v := range vols {
			got = append(got, v.Namespace+"/"+v.ID)
		}
		if strings.Join(got, ",") != strings.Join(tc.want, ",") {
			t.Errorf("plugin %q: %v, want %v", tc.plugin, got, tc.want)
		}
	}
}

// The volumes' indexers build exactly the keys memdb's CompoundIndex of
// StringFieldIndexes builds (the index order, lookups and prefixes depend
// on it).
func TestVolumeKeyIndexer(t *testing.T) {
	idx := schema().Tables[TableVolumes].Indexes
	for _, v := range []*structs.Volume{
		{Namespace: "default", ID: "vol-1", PluginID: "ebs", ExternalID: "disk-1"},
		{Namespace: "ns-é", ID: "a\x01b", PluginID: "p", ExternalID: "vol/with/slashes"},
		{Namespace: "", ID: "x", PluginID: "ebs", ExternalID: ""},
		{Namespace: "n", ID: "", PluginID: "", ExternalID: "e"},
	} {
		for _, name := range []string{indexID, indexExternal} {
			x := idx[name].Indexer.(volumeKeyIndexer)
			ok, got, err := x.FromObject(v)
			wantOK, want, wantErr := x.CompoundIndex.FromObject(v)
			if ok != wantOK || !bytes.Equal(got, want) || (err == nil) != (wantErr == nil) {
				t.Errorf("%s of %+v: (%v, %q, %v), CompoundIndex gives (%v, %q, %v)", name, v, ok, got, err, wantOK, want, wantErr)
			}
		}
	}
	if _, _, err := idx[indexID].Indexer.(volumeKeyIndexer).FromObject(&structs.Alloc{}); err == nil {
		t.Error("an alloc was indexed as a volume")
	}
}

// Persist writes, over many marshal batches, exactly what encoding each row
// with a json.Encoder as a persistRow writes, in table and key order; a
// failing writer stops it with the writer's error.
func TestPersistBatches(t *testing.T) {
	s := bulkLoad(t, scaleShape{volumes: 3000, claimed: 300, releasable: 30})
	var want bytes.Buffer
	enc := json.NewEncoder(&want)
	if err := enc.Encode(persistHeader{Version: persistVersion}); err != nil {
		t.Fatal(err)
	}
	snap := s.Snapshot()
	for _, table := range persistTables {
		it, err := snap.txn.Get(table, indexID)
		if err != nil {
			t.Fatal(err)
		}
		for raw := it.Next(); raw != nil; raw = it.Next() {
			row, err := json.Marshal(raw)
			if err != nil {
				t.Fatal(err)
			}
			if err := enc.Encode(persistRow{Table: table, Row: row}); err != nil {
				t.Fatal(err)
			}
		}
	}
	var got bytes.Buffer
	if err := snap.Persist(&got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want.Bytes()) {
		t.Fatalf("Persist wrote %d bytes that differ from the row-by-row encoding (%d bytes)", got.Len(), want.Len())
	}
	errDisk := errors.New("disk full")
	if err := snap.Persist(&failAfter{n: 100_000, err: errDisk}); !errors.Is(err, errDisk) {
		t.Fatalf("got %v, want the writer's error", err)
	}
}

// failAfter accepts n bytes, then fails every write with err.
type failAfter struct {
	n   int
	err error
}

func (f *failAfter) Write(p []byte) (int, error) {
	if len(p) > f.n {
		n := f.n
		f.n = 0
		return n, f.err
	}
	f.n -= len(p)
	return len(p), nil
}

// A stream whose volumes are out of key order (Persist never writes one,
// but the counters must not depend on it) still counts each stored volume
// once: the counters describe the table, not the rows read.
func TestRestoreUnorderedVolumeCounts(t *testing.T) {
	f := richFixture(t)
	stream := withReversedVolumeRows(t, f.s)
	want, _ := f.s.Snapshot().VolumeStats()
	s := NewStore()
	if err := s.Restore(strings.NewReader(stream)); err != nil {
		t.Fatal(err)
	}
	got, _ := s.Snapshot().VolumeStats()
	if got.Volumes != want.Volumes || got.Stuck != want.Stuck || got.Claims[structs.ClaimTaken] != want.Claims[structs.ClaimTaken] {
		t.Fatalf("stats %+v after a stream with volumes out of order, want %+v", got, want)
	}
}

// withReversedVolumeRows is s's snapshot stream with its volume rows in
// reverse key order: a restore must end as if they were in order.
func withReversedVolumeRows(t *testing.T, s *Store) string {
	t.Helper()
	var good bytes.Buffer
	if err := s.Persist(&good); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	var vols []string
	for _, line := range strings.SplitAfter(good.String(), "\n") {
		if strings.HasPrefix(line, `{"t":"volumes"`) {
			vols = append(vols, line)
			continue
		}
		for i := len(vols) - 1; i >= 0; i-- {
			out.WriteString(vols[i])
		}
		vols = nil
		out.WriteString(line)
	}
	if strings.Count(out.String(), `{"t":"volumes"`) < 2 {
		t.Fatal("the fixture has fewer than two volumes: nothing to reorder")
	}
	return out.String()
}
