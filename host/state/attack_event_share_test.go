package state

import (
	"bytes"
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/volhost/volhost/host/structs"
)

// Regression attacks on the events' sharing (event_share.go): every event
// reads back as written, whatever was written after it, and the rings are
// placed and trimmed as before the sharing.

func copyEvent(e *structs.Event) structs.Event {
	c := *e
	c.Fields = maps.Clone(e.Fields) // nil stays nil, empty stays empty
	return c
}

// eventsBySeq deep-copies every stored event, by sequence number.
func eventsBySeq(t *testing.T, s *Store) map[uint64]structs.Event {
	t.Helper()
	es, _, err := s.Snapshot().EventsFiltered(nil, EventFilter{})
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[uint64]structs.Event, len(es))
	for _, e := range es {
		out[e.Seq] = copyEvent(e.Event)
	}
	return out
}

// stillThere fails when an event of before still stored differs now.
func stillThere(t *testing.T, s *Store, before map[uint64]structs.Event, after string) {
	t.Helper()
	now := eventsBySeq(t, s)
	for seq, want := range before {
		got, ok := now[seq]
		if !ok {
			continue // trimmed
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("after %s: event %d is now %+v, was %+v", after, seq, got, want)
		}
	}
}

func attackFieldCatalog() []map[string]string {
	eight := map[string]string{}
	for i := range 8 {
		eight[fmt.Sprint("k", i)] = fmt.Sprint("v", i)
	}
	eightOther := maps.Clone(eight)
	eightOther["k7"] = "v7\x00"
	nine := maps.Clone(eight)
	nine["k8"] = "v8"
	nineOther := maps.Clone(nine)
	nineOther["k0"] = "v0 "
	cat := []map[string]string{
		nil, {},
		{"": ""}, {"": "\x00"}, {"\x00": ""},
		{"a": "b\x00c"}, {"a\x00b": "c"},
		{"ab": "c"}, {"a": "bc"},
		{"a": "\x01b"}, {"a\x01": "b"}, {"\x01": "ab"},
		{"a": "1", "b": "2"}, {"a": "1b\x012"}, {"a": "1", "b": "2", "c": ""},
		{"k": "\xff\xfe"}, {"k": "\xfe\xff"}, {"\xff": "k"},
		eight, eightOther, nine, nineOther,
	}
	// Values about the key bound: the same up to the last byte.
	for _, n := range []int{maxSharedFieldsKey - 30, maxSharedFieldsKey - 21, maxSharedFieldsKey - 20, maxSharedFieldsKey - 19, maxSharedFieldsKey, 1 << 12} {
		base := strings.Repeat("x", n)
		cat = append(cat, map[string]string{"e": base + "a"}, map[string]string{"e": base + "b"})
	}
	return cat
}

// Maps that differ never come back equal; a caller changing the maps it
// handed in changes nothing stored; later writes with the same maps leave
// earlier events as written.
// (Persist writes invalid UTF-8 as U+FFFD, which a restore keeps: that
// was so before the sharing, so the restore half leaves those maps out.)
func TestAttackEventShareFieldsCatalog(t *testing.T) {
	t.Run("all", func(t *testing.T) { attackFieldCatalogRun(t, attackFieldCatalog(), false) })
	var valid []map[string]string
	for _, m := range attackFieldCatalog() {
		ok := true
		for k, v := range m {
			ok = ok && utf8.ValidString(k) && utf8.ValidString(v)
		}
		if ok {
			valid = append(valid, m)
		}
	}
	t.Run("restored", func(t *testing.T) { attackFieldCatalogRun(t, valid, true) })
}

func attackFieldCatalogRun(t *testing.T, cat []map[string]string, restore bool) {
	f := newEmpty(t)
	var want []structs.Event
	var handed []map[string]string
	write := func(evs ...*structs.Event) {
		for _, e := range evs {
			want = append(want, copyEvent(e))
			handed = append(handed, e.Fields)
		}
		f.appendEvents(evs...)
	}
	types := []string{structs.EventClaimTransition, structs.EventModule, structs.EventAudit}
	for round := range 3 {
		var batch []*structs.Event
		for i, m := range cat {
			e := transition(fmt.Sprint("v", i%3), maps.Clone(m))
			if m == nil {
				e.Fields = nil
			}
			e.Type = types[(i+round)%len(types)]
			batch = append(batch, e)
		}
		write(batch...)
		// The callers change what they handed in.
		for _, m := range handed {
			for k := range m {
				m[k] = "MUTATED"
			}
			if m != nil {
				m["extra"] = "MUTATED"
			}
		}
	}
	check := func(t *testing.T, got []*structs.Event) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("%d events, want %d", len(got), len(want))
		}
		for i := range want {
			w := want[i]
			w.Index, w.Time = got[i].Index, got[i].Time
			if g := copyEvent(got[i]); !reflect.DeepEqual(g, w) {
				t.Fatalf("event %d: %q, want %q", i, g.Fields, w.Fields)
			}
		}
	}
	check(t, f.events())
	check(t, f.filtered(EventFilter{}))
	before := eventsBySeq(t, f.s)
	if !restore {
		for i, m := range cat {
			e := transition(fmt.Sprint("v", i%3), maps.Clone(m))
			f.appendEvents(e)
			e.Fields["x"] = "MUTATED"
		}
		stillThere(t, f.s, before, "more writes")
		return
	}

	var buf bytes.Buffer
	if err := f.s.Persist(&buf); err != nil {
		t.Fatal(err)
	}
	persisted := buf.String()
	r := newEmpty(t)
	r.appendEvents(transition("zz", map[string]string{"a": "1", "b": "2"}))
	if err := r.s.Restore(&buf); err != nil {
		t.Fatal(err)
	}
	r.idx = f.idx
	var again bytes.Buffer
	if err := r.s.Persist(&again); err != nil {
		t.Fatal(err)
	}
	if again.String() != persisted {
		t.Fatal("restored store persists other bytes")
	}
	restored := eventsBySeq(t, r.s)
	// More of the same after the restore, in both stores.
	for _, s := range []*fixture{f, r} {
		for i, m := range cat {
			e := transition(fmt.Sprint("v", i%3), maps.Clone(m))
			s.appendEvents(e)
			e.Fields["x"] = "MUTATED"
		}
	}
	stillThere(t, f.s, before, "more writes")
	stillThere(t, r.s, restored, "a restore and more writes")
}

// Writes of every kind that record events leave earlier events as they
// were, across a restore too.
func TestAttackEventShareOtherWrites(t *testing.T) {
	f := newFixture(t)
	snap := eventsBySeq(t, f.s)
	step := func(name string, do func()) {
		t.Helper()
		do()
		stillThere(t, f.s, snap, name)
		snap = eventsBySeq(t, f.s)
	}
	fenceFields := func() map[string]string {
		return map[string]string{"action": "fence", "reason": "off", "source": "operator", "accessor": "acc-1"}
	}
	step("claim", func() { f.claim("vol-mw", "a1", structs.ClaimWrite) })
	step("claim 2", func() { f.claim("vol-mw", "a2", structs.ClaimWrite) })
	step("append", func() {
		f.appendEvents(transition("vol-mw", map[string]string{"attempts": "0", "from": "taken", "state": "node-detached"}),
			&structs.Event{Type: structs.EventAudit, Fields: fenceFields()},
			&structs.Event{Type: structs.EventNodeFence, NodeID: "n1", Fields: fenceFields()})
	})
	step("allocs complete", func() {
		f.setAlloc("a1", structs.AllocComplete)
		f.setAlloc("a2", structs.AllocComplete)
	})
	step("checkpoint", func() {
		if err := f.checkpoint("vol-mw", "a1", structs.ClaimNodeDetached); err != nil {
			t.Fatal(err)
		}
	})
	step("checkpoint 2", func() {
		if err := f.checkpoint("vol-mw", "a2", structs.ClaimNodeDetached); err != nil {
			t.Fatal(err)
		}
	})
	step("fence", func() {
		f.must(structs.NodeFenceType, &structs.NodeFenceRequest{NodeID: "n2", Fence: fence("off")})
	})
	step("unfence", func() { f.must(structs.NodeFenceType, &structs.NodeFenceRequest{NodeID: "n2", Accessor: "acc-1"}) })
	step("fence again", func() {
		f.must(structs.NodeFenceType, &structs.NodeFenceRequest{NodeID: "n2", Fence: fence("off")})
	})
	step("liveness", func() {
		f.must(structs.NodeLivenessType, &structs.NodeLivenessRequest{NodeID: "n3", From: structs.NodeReady,
			Status: structs.NodeDown, Reason: "no heartbeat", Time: t0})
	})
	step("restore", func() {
		var buf bytes.Buffer
		if err := f.s.Persist(&buf); err != nil {
			t.Fatal(err)
		}
		d := f.digest()
		if err := f.s.Restore(&buf); err != nil {
			t.Fatal(err)
		}
		if f.digest() != d {
			t.Fatal("digest changed by a restore")
		}
	})
	step("checkpoint after restore", func() {
		if err := f.checkpoint("vol-mw", "a1", structs.ClaimControllerDetached); err != nil {
			t.Fatal(err)
		}
	})
	step("append after restore", func() {
		e := &structs.Event{Type: structs.EventAudit, Fields: fenceFields()}
		f.appendEvents(e, transition("vol-mw", map[string]string{"attempts": "0", "from": "taken", "state": "node-detached"}))
		e.Fields["action"] = "MUTATED"
	})
	// The attack is only one if maps were shared.
	seen, shared := map[uintptr]bool{}, false
	for _, e := range f.events() {
		if len(e.Fields) > 0 {
			p := reflect.ValueOf(e.Fields).Pointer()
			shared = shared || seen[p]
			seen[p] = true
		}
	}
	if !shared {
		t.Fatal("no two stored events share a map of fields")
	}
}

// The rings' placement and trimming, against a model of the rules before
// the sharing, with volume names that are prefixes of each other and
// carry NULs.
func TestAttackEventShareRingPlacement(t *testing.T) {
	ret := EventRetention{PerVolume: 3, Global: 2, Audit: 2, MaxVolumeEvents: 9}
	type vol struct{ ns, id string }
	vols := []vol{{"d", "a"}, {"d", "ab"}, {"d", "a\x00b"}, {"d\x00a", "b"}, {"d", "a\x00\x00"}, {"d", "a\x00\x01"}, {"d", "a\x00\xc3\xbf"}, {"da", "b"}, {"", "a"}}
	type row struct {
		seq, ringSeq uint64
		ring, msg    string
	}
	var model []row
	var lastSeq uint64
	applyModel := func(evs []*structs.Event) {
		written := map[string]uint64{}
		for _, e := range evs {
			ring := ringOf(e)
			rs, ok := written[ring]
			if !ok {
				for _, r := range model {
					if r.ring == ring {
						rs = r.ringSeq
					}
				}
			}
			lastSeq++
			model = append(model, row{lastSeq, rs + 1, ring, e.Message})
			written[ring] = rs + 1
		}
		keep := model[:0]
		for _, r := range model {
			if last, ok := written[r.ring]; ok && last > uint64(ret.limit(r.ring)) && r.ringSeq <= last-uint64(ret.limit(r.ring)) {
				continue
			}
			keep = append(keep, r)
		}
		model = keep
		n := 0
		for _, r := range model {
			if isVolumeRing(r.ring) {
				n++
			}
		}
		if n > ret.MaxVolumeEvents {
			excess := n - ret.MaxVolumeEvents
			keep := model[:0]
			for _, r := range model {
				if isVolumeRing(r.ring) && excess > 0 {
					excess--
					continue
				}
				keep = append(keep, r)
			}
			model = keep
		}
	}
	rows := func(s *Store) []row {
		it, err := s.Snapshot().txn.Get(TableEvents, indexID)
		if err != nil {
			t.Fatal(err)
		}
		var out []row
		for raw := it.Next(); raw != nil; raw = it.Next() {
			r := raw.(*eventRow)
			if r.Ring != ringOf(r.Event) {
				t.Fatalf("event %d in ring %q, belongs to %q", r.Seq, r.Ring, ringOf(r.Event))
			}
			out = append(out, row{r.Seq, r.RingSeq, r.Ring, r.Event.Message})
		}
		return out
	}
	rnd := rand.New(rand.NewPCG(1, 2))
	f := newEmpty(t, WithEventRetention(ret))
	for w := range 300 {
		var evs []*structs.Event
		for i := range 1 + rnd.IntN(5) {
			msg := fmt.Sprintf("w%d.%d", w, i)
			switch k := rnd.IntN(len(vols) + 2); {
			case k < len(vols):
				v := vols[k]
				evs = append(evs, &structs.Event{Type: structs.EventClaimTransition, Namespace: v.ns, VolumeID: v.id, Message: msg,
					Fields: map[string]string{"n": fmt.Sprint(rnd.IntN(3))}})
			case k == len(vols):
				evs = append(evs, &structs.Event{Type: structs.EventAudit, Message: msg, Fields: map[string]string{"n": "1"}})
			default:
				evs = append(evs, &structs.Event{Type: structs.EventModule, Message: msg})
			}
		}
		applyModel(evs)
		f.appendEvents(evs...)
		if w%50 == 49 {
			var buf bytes.Buffer
			if err := f.s.Persist(&buf); err != nil {
				t.Fatal(err)
			}
			if err := f.s.Restore(&buf); err != nil {
				t.Fatal(err)
			}
		}
		if got := rows(f.s); !reflect.DeepEqual(got, model) {
			t.Fatalf("after write %d:\n got %+q\nwant %+q", w, fmt.Sprint(got), fmt.Sprint(model))
		}
	}
}
