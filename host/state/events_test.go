package state

import (
	"bytes"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/volhost/volhost/host/structs"
)

func volEvent(vol, msg string) *structs.Event {
	return &structs.Event{Type: structs.EventClaimTransition, Namespace: "default", VolumeID: vol, Message: msg}
}

func (f *fixture) appendEvents(evs ...*structs.Event) {
	f.t.Helper()
	f.must(structs.EventAppendType, &structs.EventAppendRequest{Events: evs})
}

func (f *fixture) filtered(flt EventFilter) []*structs.Event {
	f.t.Helper()
	es, _, err := f.s.Snapshot().EventsFiltered(nil, flt)
	if err != nil {
		f.t.Fatal(err)
	}
	out := make([]*structs.Event, len(es))
	for i, e := range es {
		out[i] = e.Event
	}
	return out
}

// A flood of claim events on one volume evicts only that volume's oldest
// events: another volume's history, the audit trail and the global ring
// keep theirs.
func TestEventFloodEvictsOnlyItsOwnRing(t *testing.T) {
	f := newEmpty(t, WithEventRetention(EventRetention{PerVolume: 10, Global: 5, Audit: 5}))
	f.appendEvents(volEvent("quiet", "q1"), volEvent("quiet", "q2"),
		&structs.Event{Type: structs.EventAudit, Message: "force deregister", Fields: map[string]string{"action": "force-deregister"}},
		&structs.Event{Type: structs.EventModule, Message: "module loaded"})
	for i := range 200 {
		f.appendEvents(volEvent("busy", fmt.Sprint("b", i)), volEvent("busy", fmt.Sprint("c", i)))
	}
	busy := f.filtered(EventFilter{Namespace: "default", VolumeID: "busy"})
	if len(busy) != 10 || busy[9].Message != "c199" || busy[0].Message != "b195" {
		t.Fatalf("busy ring: %d events, first %q last %q", len(busy), busy[0].Message, busy[len(busy)-1].Message)
	}
	if q := f.filtered(EventFilter{Namespace: "default", VolumeID: "quiet"}); len(q) != 2 || q[0].Message != "q1" {
		t.Fatalf("quiet volume lost its history: %+v", q)
	}
	if a := f.filtered(EventFilter{Type: structs.EventAudit}); len(a) != 1 || a[0].Fields["action"] != "force-deregister" {
		t.Fatalf("audit trail: %+v", a)
	}
	if g := f.filtered(EventFilter{Type: structs.EventModule}); len(g) != 1 {
		t.Fatalf("global ring: %+v", g)
	}
	// "busy" is not a prefix match of another ring: "busy2" stays apart.
	f.appendEvents(volEvent("busy2", "x"))
	if b2 := f.filtered(EventFilter{Namespace: "default", VolumeID: "busy2"}); len(b2) != 1 {
		t.Fatalf("busy2: %+v", b2)
	}
	if b := f.filtered(EventFilter{Namespace: "default", VolumeID: "busy"}); len(b) != 10 {
		t.Fatalf("busy after busy2: %d", len(b))
	}
}

// All volume rings together are capped: the oldest volume events go first,
// the count survives a restore.
func TestVolumeEventsTotalCap(t *testing.T) {
	ret := EventRetention{PerVolume: 10, MaxVolumeEvents: 15}
	f := newEmpty(t, WithEventRetention(ret))
	for _, v := range []string{"a", "b", "c"} {
		for i := range 10 {
			f.appendEvents(volEvent(v, fmt.Sprint(v, i)))
		}
	}
	all := f.filtered(EventFilter{})
	if len(all) != 15 || all[0].Message != "b5" {
		t.Fatalf("%d volume events kept, first %q; want 15 from b5", len(all), all[0].Message)
	}
	var buf bytes.Buffer
	if err := f.s.Persist(&buf); err != nil {
		t.Fatal(err)
	}
	s2 := NewStore(WithEventRetention(ret), WithClock(f.clk))
	if err := s2.Restore(&buf); err != nil {
		t.Fatal(err)
	}
	f2 := &fixture{t: t, s: s2, clk: f.clk, idx: f.idx}
	f2.appendEvents(volEvent("d", "d0"))
	if all := f2.filtered(EventFilter{}); len(all) != 15 || all[0].Message != "b6" {
		t.Fatalf("after restore: %d kept, first %q", len(all), all[0].Message)
	}
}

// Past MaxVolumeEvents the trim takes the oldest volume events down to a
// 64th below the cap in one entry, not one event per event written: the
// table never holds more than the cap, and the entries between two trims
// delete nothing.
func TestVolumeEventsTrimInBatches(t *testing.T) {
	const max = 640 // a batch of 10
	f := newEmpty(t, WithEventRetention(EventRetention{PerVolume: 100, MaxVolumeEvents: max}))
	for i := range max {
		f.appendEvents(volEvent(fmt.Sprint("v", i%20), fmt.Sprint(i)))
	}
	oldest := func() (int, string) {
		all := f.filtered(EventFilter{})
		return len(all), all[0].Message
	}
	if n, first := oldest(); n != max || first != "0" {
		t.Fatalf("at the cap: %d kept from %q, want %d from 0", n, first, max)
	}
	f.appendEvents(volEvent("v0", fmt.Sprint(max)))
	if n, first := oldest(); n != max-10 || first != "11" {
		t.Fatalf("one past the cap: %d kept from %q, want %d from 11 (the oldest 11 in one trim)", n, first, max-10)
	}
	for i := max + 1; i < max+11; i++ {
		f.appendEvents(volEvent("v1", fmt.Sprint(i)))
		if n, first := oldest(); n != i-10 || first != "11" {
			t.Fatalf("event %d, below the cap again: %d kept from %q, want %d from 11 (nothing trimmed)", i, n, first, i-10)
		}
	}
	f.appendEvents(volEvent("v2", fmt.Sprint(max+11)))
	if n, first := oldest(); n != max-10 || first != "22" {
		t.Fatalf("past the cap again: %d kept from %q, want %d from 22", n, first, max-10)
	}
}

// Past the cap of all volumes' events a trim deletes a 64th of it in one
// entry: at the default cap 3,125 events, more nodes of the events'
// indexes than go-immutable-radix used to track for its commit's notify,
// so the commit walked the whole events table, old and new, on every
// server (8% of a leader's CPU in the releases at 1,000,000 volumes). What
// the trim's entry allocates follows its batch, not the table: a walk
// makes an object for every node of both trees.
func TestEventTrimDoesNotWalkTheTable(t *testing.T) {
	if raceOn {
		t.Skip("counts allocations, which the race detector adds to")
	}
	f := newEmpty(t) // the default retention
	max := DefaultMaxVolumeEvents
	batch := make([]*structs.Event, 0, 1000)
	for i := range max {
		// 50 events on each of 4,000 volumes: under the ring of 100 each.
		batch = append(batch, volEvent(fmt.Sprint("v", i%4000), "e"))
		if len(batch) == cap(batch) {
			f.appendEvents(batch...)
			batch = batch[:0]
		}
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f.appendEvents(volEvent("v0", "past the cap"))
	runtime.ReadMemStats(&after)
	if got, want := f.s.events.volEvents, max-volumeTrimBatch(max); got != want {
		t.Fatalf("%d volume events after the trim, want %d: the entry did not trim a batch", got, want)
	}
	allocs := after.Mallocs - before.Mallocs
	t.Logf("the trim's entry: %d objects, %d bytes allocated", allocs, after.TotalAlloc-before.TotalAlloc)
	if allocs > uint64(max) {
		t.Fatalf("the trim's entry allocated %d objects, more than the table's %d events: its commit walked the table", allocs, max)
	}
}

func TestEventsFilteredByTypeTimeAndPage(t *testing.T) {
	f := newEmpty(t)
	for i := range 6 {
		f.clk.Advance(time.Minute)
		typ := structs.EventClaimTransition
		if i%2 == 1 {
			typ = structs.EventClaimFailed
		}
		f.appendEvents(&structs.Event{Type: typ, Namespace: "default", VolumeID: "v", Message: fmt.Sprint(i)})
	}
	if got := f.filtered(EventFilter{Type: structs.EventClaimFailed}); len(got) != 3 || got[0].Message != "1" {
		t.Fatalf("by type: %+v", got)
	}
	after := t0.Add(3 * time.Minute)
	if got := f.filtered(EventFilter{After: after, Before: after.Add(2 * time.Minute)}); len(got) != 2 || got[0].Message != "2" {
		t.Fatalf("by time: %+v", got)
	}
	es, next, err := f.s.Snapshot().EventsFiltered(nil, EventFilter{Limit: 4})
	if err != nil || len(es) != 4 || next == 0 {
		t.Fatalf("page 1: %d next %d %v", len(es), next, err)
	}
	es2, next2, _ := f.s.Snapshot().EventsFiltered(nil, EventFilter{Limit: 4, FromSeq: next})
	if len(es2) != 2 || next2 != 0 || es2[0].Seq != next {
		t.Fatalf("page 2: %+v next %d", es2, next2)
	}
}

// A type filter reads the type index (every type but claim transitions)
// or the sequence scan (claim transitions), and both answer what a scan of
// every event filtered by type answers: page by page from any sequence
// number, after the rings were trimmed and after a restore.
func TestEventsTypeFilterMatchesScan(t *testing.T) {
	ret := EventRetention{PerVolume: 6, Global: 8, Audit: 4, MaxVolumeEvents: 40}
	f := newEmpty(t, WithEventRetention(ret))
	types := structs.EventTypes
	for i := range 300 {
		e := volEvent(fmt.Sprint("v", i%9), fmt.Sprint(i)) // mostly claim transitions
		if i%5 == 0 {
			e.Type = types[(i/5)%len(types)]
			if i%3 == 0 { // some of another type on no volume: the global ring
				e.Namespace, e.VolumeID = "", ""
			}
		}
		f.appendEvents(e)
	}
	check := func(s *Store, when string) {
		t.Helper()
		all, _, err := s.Snapshot().EventsFiltered(nil, EventFilter{})
		if err != nil {
			t.Fatal(err)
		}
		seen := 0
		for _, typ := range types {
			var want []EventEntry
			for _, e := range all {
				if e.Event.Type == typ {
					want = append(want, e)
				}
			}
			seen += len(want)
			// From the start and from each matching event and the one after
			// it, in pages of 3 and unpaged.
			starts := []uint64{0}
			for _, e := range want {
				starts = append(starts, e.Seq, e.Seq+1)
			}
			for _, from := range starts {
				for _, limit := range []int{0, 3} {
					got, next, err := s.Snapshot().EventsFiltered(nil, EventFilter{Type: typ, FromSeq: from, Limit: limit})
					if err != nil {
						t.Fatal(err)
					}
					var exp []EventEntry
					for _, e := range want {
						if e.Seq >= from {
							exp = append(exp, e)
						}
					}
					wantNext := uint64(0)
					if limit > 0 && len(exp) > limit {
						wantNext, exp = exp[limit].Seq, exp[:limit]
					}
					if len(got) != len(exp) || next != wantNext {
						t.Fatalf("%s: type %s from %d limit %d: %d events next %d, a scan gives %d next %d", when, typ, from, limit, len(got), next, len(exp), wantNext)
					}
					for i := range got {
						if got[i].Seq != exp[i].Seq || got[i].Event != exp[i].Event {
							t.Fatalf("%s: type %s from %d: event %d is seq %d, a scan gives %d", when, typ, from, i, got[i].Seq, exp[i].Seq)
						}
					}
				}
			}
		}
		if seen != len(all) || len(all) < 40 {
			t.Fatalf("%s: the types cover %d of %d events", when, seen, len(all))
		}
	}
	check(f.s, "trimmed")
	var buf bytes.Buffer
	if err := f.s.Persist(&buf); err != nil {
		t.Fatal(err)
	}
	s2 := NewStore(WithEventRetention(ret), WithClock(f.clk))
	if err := s2.Restore(&buf); err != nil {
		t.Fatal(err)
	}
	check(s2, "restored")
}

// A server that restored a snapshot numbers the events of the entries
// after it as the server that applied every entry does, whatever the
// retention trimmed: the store keeps the table's last sequence number
// and where the trim of all volume rings together starts reading between
// writes (eventCounts), and forgets both
// on a restore, also of an empty table.
func TestEventNumbersAfterARestoreMatchTheLogs(t *testing.T) {
	writes := [][]*structs.Event{
		{volEvent("a", "a0")},
		{volEvent("a", "a1"), volEvent("b", "b0"), volEvent("c", "c0")},
		{{Type: structs.EventAudit, Message: "audit"}},
		{volEvent("b", "b1")},
		{{Type: structs.EventModule, Message: "module"}, volEvent("c", "c1")},
		{volEvent("a", "a2"), volEvent("a", "a3")},
		{volEvent("d", "d0")},
	}
	for _, ret := range []EventRetention{
		{},
		{PerVolume: 1},
		{PerVolume: 10, MaxVolumeEvents: 1},
		{PerVolume: 1, Global: 1, Audit: 1, MaxVolumeEvents: 2},
	} {
		t.Run(fmt.Sprintf("%+v", ret), func(t *testing.T) {
			all := newEmpty(t, WithEventRetention(ret))
			for _, w := range writes {
				all.appendEvents(w...)
			}
			for cut := range writes {
				first := newEmpty(t, WithEventRetention(ret))
				for _, w := range writes[:cut] {
					first.appendEvents(w...)
				}
				var buf bytes.Buffer
				if err := first.s.Persist(&buf); err != nil {
					t.Fatal(err)
				}
				// The restoring store wrote events of its own first: what it
				// knew of its table before the restore must not count.
				restored := newEmpty(t, WithEventRetention(ret))
				for _, w := range writes {
					restored.appendEvents(w...)
				}
				if err := restored.s.Restore(&buf); err != nil {
					t.Fatal(err)
				}
				restored.idx = first.idx
				for _, w := range writes[cut:] {
					restored.appendEvents(w...)
				}
				if got, want := eventSeqs(t, restored), eventSeqs(t, all); got != want {
					t.Fatalf("restored after %d writes: events %s, the store that applied them all: %s", cut, got, want)
				}
			}
		})
	}
}

// eventSeqs lists f's events with their sequence numbers.
func eventSeqs(t *testing.T, f *fixture) string {
	t.Helper()
	es, _, err := f.s.Snapshot().EventsFiltered(nil, EventFilter{})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, e := range es {
		fmt.Fprintf(&b, "%d:%s ", e.Seq, e.Event.Message)
	}
	return b.String()
}

// BenchmarkVolumeEventsCapBehindOldEvents: one volume event appended per
// entry to a store past its cap on all volume events (so each entry
// deletes the oldest volume event), with and without 20,000 older events
// of no volume (the audit and global rings full, as on a server that has
// run for a while) ahead of the oldest volume event in sequence order.
// The trim looks for the oldest volume events: it must not read past the
// others at every write.
//
//	go test -run '^$' -bench '^BenchmarkVolumeEventsCapBehindOldEvents$' ./host/state/
func BenchmarkVolumeEventsCapBehindOldEvents(b *testing.B) {
	for _, older := range []int{0, 20_000} {
		b.Run(fmt.Sprintf("older=%d", older), func(b *testing.B) {
			ret := EventRetention{PerVolume: 100, Audit: older/2 + 1, Global: older/2 + 1, MaxVolumeEvents: 1000}
			f := newEmpty(b, WithEventRetention(ret))
			for i := 0; i < older; i += 1000 {
				var evs []*structs.Event
				for j := i; j < min(i+1000, older); j++ {
					typ := structs.EventAudit
					if j%2 == 1 {
						typ = structs.EventModule
					}
					evs = append(evs, &structs.Event{Type: typ, Message: "old"})
				}
				f.appendEvents(evs...)
			}
			for i := range 2 * ret.MaxVolumeEvents {
				f.appendEvents(volEvent(fmt.Sprintf("v%d", i%500), "fill"))
			}
			b.ResetTimer()
			for i := range b.N {
				f.appendEvents(volEvent(fmt.Sprintf("v%d", i%500), "next"))
			}
		})
	}
}
