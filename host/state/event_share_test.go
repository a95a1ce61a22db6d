package state

import (
	"bytes"
	"fmt"
	"maps"
	"reflect"
	"strings"
	"testing"

	"github.com/volhost/volhost/host/structs"
)

func sameMap(a, b map[string]string) bool {
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}

// transition is a claim transition of vol with fields, its strings each
// of its own allocation, as a decoded log entry's are.
func transition(vol string, fields map[string]string) *structs.Event {
	own := func(s string) string { return strings.Clone(s) }
	f := map[string]string{}
	for k, v := range fields {
		f[own(k)] = own(v)
	}
	return &structs.Event{Type: own(structs.EventClaimTransition), Namespace: own("default"), VolumeID: vol,
		NodeID: own("node-1"), PluginID: own("ebs"), Message: own("claim taken -> node-detached"), Fields: f}
}

// Events written and events restored hold one copy of the maps and
// strings they repeat, with every value as written.
func TestEventsShareTheirRepeatedFields(t *testing.T) {
	taken := map[string]string{"attempts": "0", "from": "taken", "state": "node-detached"}
	other := map[string]string{"attempts": "1", "from": "taken", "state": "node-detached"}
	f := newEmpty(t)
	f.appendEvents(transition("a", taken), transition("b", taken))
	f.appendEvents(transition("c", taken), transition("a", other), transition("a", taken))
	check := func(t *testing.T, evs []*structs.Event) {
		t.Helper()
		if len(evs) != 5 {
			t.Fatalf("%d events, want 5", len(evs))
		}
		for i, e := range evs {
			want := taken
			if i == 3 {
				want = other
			}
			if !maps.Equal(e.Fields, want) {
				t.Fatalf("event %d fields %v, want %v", i, e.Fields, want)
			}
		}
		for _, i := range []int{1, 2, 4} {
			if !sameMap(evs[0].Fields, evs[i].Fields) {
				t.Errorf("event %d keeps its own map of the fields event 0 has", i)
			}
			if !sameString(evs[0].Message, evs[i].Message) || !sameString(evs[0].NodeID, evs[i].NodeID) ||
				!sameString(evs[0].Namespace, evs[i].Namespace) || !sameString(evs[0].PluginID, evs[i].PluginID) {
				t.Errorf("event %d keeps its own copy of a string event 0 has", i)
			}
		}
		if sameMap(evs[0].Fields, evs[3].Fields) {
			t.Error("events with different fields share one map")
		}
	}
	t.Run("written", func(t *testing.T) { check(t, f.events()) })
	t.Run("restored", func(t *testing.T) {
		var buf bytes.Buffer
		if err := f.s.Persist(&buf); err != nil {
			t.Fatal(err)
		}
		want := buf.String()
		r := newEmpty(t)
		if err := r.s.Restore(&buf); err != nil {
			t.Fatal(err)
		}
		check(t, r.events())
		var again bytes.Buffer
		if err := r.s.Persist(&again); err != nil {
			t.Fatal(err)
		}
		if again.String() != want {
			t.Fatal("the restored store persists other bytes than the one it was restored from")
		}
	})
}

func TestFieldsTableShares(t *testing.T) {
	long := strings.Repeat("x", maxSharedFieldsKey)
	for _, tc := range []struct {
		name  string
		a, b  map[string]string
		share bool
	}{
		{"equal", map[string]string{"a": "1", "b": "2"}, map[string]string{"b": "2", "a": "1"}, true},
		{"a value differs", map[string]string{"a": "1", "b": "2"}, map[string]string{"a": "1", "b": "3"}, false},
		{"a key more", map[string]string{"a": "1"}, map[string]string{"a": "1", "b": ""}, false},
		// Without the lengths both would read "a", "b\x00c".
		{"a separator inside a value", map[string]string{"a": "b\x00c"}, map[string]string{"a\x00b": "c"}, false},
		{"the key and value's split", map[string]string{"ab": "c"}, map[string]string{"a": "bc"}, false},
		{"too long to key", map[string]string{"e": long}, map[string]string{"e": long}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ft fieldsTable
			a := ft.share(tc.a)
			b := ft.share(maps.Clone(tc.b))
			if got := sameMap(a, b); got != tc.share {
				t.Fatalf("shared %v, want %v", got, tc.share)
			}
			if !maps.Equal(b, tc.b) {
				t.Fatalf("share(%v) answered %v", tc.b, b)
			}
		})
	}
	t.Run("bounded", func(t *testing.T) {
		var ft fieldsTable
		first := ft.share(map[string]string{"n": "first"})
		for i := range maxSharedFields {
			ft.share(map[string]string{"n": fmt.Sprint(i)})
		}
		if len(ft.maps) > maxSharedFields {
			t.Fatalf("%d maps kept, bound %d", len(ft.maps), maxSharedFields)
		}
		// Started again past the bound: the first map is forgotten, and
		// maps repeated from then on are shared again.
		if sameMap(first, ft.share(map[string]string{"n": "first"})) {
			t.Fatal("the table kept a map past its bound")
		}
		again := ft.share(map[string]string{"n": "again"})
		if !sameMap(again, ft.share(map[string]string{"n": "again"})) {
			t.Fatal("the table shares nothing after starting again")
		}
	})
}
