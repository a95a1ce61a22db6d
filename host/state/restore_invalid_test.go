package state

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// invalidRows are snapshot streams whose every line is well-formed JSON of
// the right row type, but where one row is one no sequence of writes
// makes. Each is a change to the rich fixture's stream: the row of table
// whose key field equals key gets edit applied to its decoded JSON.
var invalidRows = []struct {
	name, table, key string
	edit             func(row map[string]any) []map[string]any // rows to write instead
	want             string
}{
	{"null claim", "volumes", "vol-ro", func(r map[string]any) []map[string]any {
		r["claims"] = map[string]any{"a2": nil}
		return one(r)
	}, "claims[a2]: is null"},
	{"claim key is not its allocation", "volumes", "vol-ro", func(r map[string]any) []map[string]any {
		claims := r["claims"].(map[string]any)
		claims["a4"], claims["a2"] = claims["a2"], nil
		delete(claims, "a2")
		return one(r)
	}, `claims[a4].alloc_id: is "a2" but must equal its key "a4"`},
	{"claim on another node than its allocation", "volumes", "vol-ro", func(r map[string]any) []map[string]any {
		r["claims"].(map[string]any)["a2"].(map[string]any)["node_id"] = "n1"
		return one(r)
	}, `claims[a2].node_id: is "n1" but allocation "a2" runs on node "n2"`},
	{"claim of unknown state", "volumes", "vol-ro", func(r map[string]any) []map[string]any {
		r["claims"].(map[string]any)["a2"].(map[string]any)["state"] = "half-done"
		return one(r)
	}, "unknown claim state"},
	{"publishing claim with a release's mark", "volumes", "vol-ro", func(r map[string]any) []map[string]any {
		c := r["claims"].(map[string]any)["a2"].(map[string]any)
		c["state"], c["skip_node_step"] = "publishing", true
		return one(r)
	}, "skip_node_step is set on a publishing claim"},
	{"claim with negative attempts", "volumes", "vol-ro", func(r map[string]any) []map[string]any {
		r["claims"].(map[string]any)["a2"].(map[string]any)["attempts"] = -1
		return one(r)
	}, "attempts: must not be negative"},
	{"claim written after its volume", "volumes", "vol-ro", func(r map[string]any) []map[string]any {
		r["claims"].(map[string]any)["a2"].(map[string]any)["modify_index"] = r["modify_index"].(float64) + 1
		return one(r)
	}, "claims[a2].modify_index"},
	{"volume written after its table's last write", "volumes", "vol-ms", func(r map[string]any) []map[string]any {
		r["modify_index"] = 999
		return one(r)
	}, "written at index 999, after the last write to volumes (index 117)"},
	{"volume created after its last change", "volumes", "vol-ms", func(r map[string]any) []map[string]any {
		r["create_index"] = 110
		return one(r)
	}, "create index 110 is above its modify index 107"},
	{"event after its table's last write", "events", "8", func(r map[string]any) []map[string]any {
		r["index"] = 200
		return one(r)
	}, "after the last write to events"},
	{"stuck without a reason", "volumes", "vol-sw", func(r map[string]any) []map[string]any {
		r["stuck"] = map[string]any{"reason": ""}
		return one(r)
	}, "stuck.reason: must not be empty"},
	{"volume of an unknown plugin", "volumes", "vol-ms", func(r map[string]any) []map[string]any {
		r["plugin_id"] = "gone"
		return one(r)
	}, `plugin "gone"`},
	{"null node plugin", "nodes", "n1", func(r map[string]any) []map[string]any {
		r["plugins"] = map[string]any{"ebs": nil}
		return one(r)
	}, "node.plugins[ebs]: is null"},
	{"live allocation on an unknown node", "allocs", "a6", func(r map[string]any) []map[string]any {
		r["node_id"] = "n9"
		return one(r)
	}, `node "n9"`},
	{"event without its event", "events", "8", func(r map[string]any) []map[string]any {
		r["event"] = nil
		return one(r)
	}, "no event"},
	{"duplicated volume", "volumes", "vol-ms", func(r map[string]any) []map[string]any {
		return []map[string]any{r, r}
	}, "duplicate row default/vol-ms"},
	{"duplicated allocation", "allocs", "a3", func(r map[string]any) []map[string]any {
		return []map[string]any{r, r}
	}, "duplicate row a3"},
	{"duplicated plugin", "plugins", "ebs", func(r map[string]any) []map[string]any {
		return []map[string]any{r, r}
	}, "duplicate row ebs"},
	{"duplicated event", "events", "7", func(r map[string]any) []map[string]any {
		return []map[string]any{r, r}
	}, "does not follow 7"},
}

func one(r map[string]any) []map[string]any { return []map[string]any{r} }

// editStream applies edit to the row of table whose key is key (its "id",
// "key" or "seq" field) in the persisted stream.
func editStream(t testing.TB, stream []byte, table, key string, edit func(map[string]any) []map[string]any) []byte {
	t.Helper()
	var out bytes.Buffer
	found := false
	for line := range bytes.Lines(stream) {
		var pr struct {
			T string         `json:"t"`
			R map[string]any `json:"r"`
		}
		if json.Unmarshal(line, &pr) != nil || pr.T != table || !rowHasKey(pr.R, key) {
			out.Write(line)
			continue
		}
		found = true
		for _, r := range edit(pr.R) {
			b, err := json.Marshal(map[string]any{"t": table, "r": r})
			if err != nil {
				t.Fatal(err)
			}
			out.Write(append(b, '\n'))
		}
	}
	if !found {
		t.Fatalf("no %s row %q in the stream", table, key)
	}
	return out.Bytes()
}

func rowHasKey(r map[string]any, key string) bool {
	for _, f := range []string{"id", "key", "seq"} {
		switch v := r[f].(type) {
		case string:
			if v == key {
				return true
			}
		case float64:
			if strconv.FormatFloat(v, 'f', -1, 64) == key {
				return true
			}
		}
	}
	return false
}

// importRows reads a persisted stream's rows through a Builder, as the
// operator snapshot reader does.
func importRows(stream []byte) (*Store, error) {
	b := NewBuilder()
	for i, line := range bytes.Split(bytes.TrimSpace(stream), []byte("\n"))[1:] {
		table, row, _, err := decodeLine(line, newInterner())
		if err == nil {
			err = b.Add(table, row)
		}
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", i+2, err)
		}
	}
	return b.Store(), nil
}

// Every way a state comes in whole refuses a row no write could have
// made, with one error naming the row and the rule, and keeps the state it
// had: a raft snapshot (Store.Restore) and an operator snapshot's rows
// (Builder). A null claim used to get through both decoders and crash the
// restore (and every replica installing the snapshot) in the volume
// counters.
func TestRestoreRefusesInvalidRows(t *testing.T) {
	f := richFixture(t)
	var good bytes.Buffer
	if err := f.s.Persist(&good); err != nil {
		t.Fatal(err)
	}
	for _, tc := range invalidRows {
		t.Run(tc.name, func(t *testing.T) {
			stream := editStream(t, good.Bytes(), tc.table, tc.key, tc.edit)
			s := NewStore()
			if err := s.Restore(bytes.NewReader(good.Bytes())); err != nil {
				t.Fatal(err)
			}
			before, _ := s.Digest()
			err := s.Restore(bytes.NewReader(stream))
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "row ") {
				t.Fatalf("restore: %v, want an error naming the row and containing %q", err, tc.want)
			}
			if after, _ := s.Digest(); after != before {
				t.Fatal("a refused restore changed the state")
			}
			if _, err := importRows(stream); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("import: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// FuzzStoreRestore: a raft snapshot stream, whatever its rows, is
// restored or refused with an error, never a panic (a panic on the
// decoding goroutines or in the counters kills the replica, and every
// other replica installing the same snapshot), and a refused stream
// leaves the store's state as it was. A stream restored persists back to
// a stream that restores to the same state. The seeds are the rich
// fixture's stream and each of invalidRows' edits of it (the null claim
// first).
func FuzzStoreRestore(f *testing.F) {
	fx := richFixture(f)
	var good bytes.Buffer
	if err := fx.s.Persist(&good); err != nil {
		f.Fatal(err)
	}
	f.Add(good.Bytes())
	for _, tc := range invalidRows {
		f.Add(editStream(f, good.Bytes(), tc.table, tc.key, tc.edit))
	}
	f.Fuzz(func(t *testing.T, stream []byte) {
		s := NewStore()
		if err := s.Restore(bytes.NewReader(good.Bytes())); err != nil {
			t.Fatal(err)
		}
		before, _ := s.Digest()
		if err := s.Restore(bytes.NewReader(stream)); err != nil {
			if after, _ := s.Digest(); after != before {
				t.Fatalf("refused (%v), and the state changed", err)
			}
			return
		}
		var again bytes.Buffer
		if err := s.Persist(&again); err != nil {
			t.Fatal(err)
		}
		want, _ := s.Digest()
		s2 := NewStore()
		if err := s2.Restore(bytes.NewReader(again.Bytes())); err != nil {
			t.Fatalf("a restored state's own stream is refused: %v", err)
		}
		if got, _ := s2.Digest(); got != want {
			t.Fatal("a restored state does not round-trip")
		}
	})
}
