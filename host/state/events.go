package state

import (
	"fmt"
	"time"

	"github.com/hashicorp/go-memdb"

	"github.com/volhost/volhost/host/structs"
)

// Event retention. The events table used to be one ring of 10,000: about
// 11k claims (13 s of work) evicted every volume's history and any force
// deregister with it. Now every event lives in one ring, trimmed on its
// own: a volume's ring holds only that volume's events, so a flood on one
// volume evicts nothing of another; audit events (privileged actions) have
// their own ring that no claim traffic reaches; events of no volume
// (modules, GC passes) share the global ring. All volume rings together
// are capped too (MaxVolumeEvents), oldest first, so volumes that come and
// go cannot grow the table without bound.
const (
	DefaultEventsPerVolume = 100
	DefaultAuditEvents     = 10000
	DefaultMaxVolumeEvents = 200000

	ringGlobal = "global"
	ringAudit  = "audit"
	// ringVolumePrefix + namespace + "\x00" + id names a volume's ring.
	ringVolumePrefix = "v\x00"
)

// EventRetention sizes the event rings; 0 takes the default.
type EventRetention struct {
	PerVolume       int // events kept per volume
	Global          int // events of no volume (the old MaxEvents)
	Audit           int // audit events
	MaxVolumeEvents int // events of all volumes together
}

// WithEventRetention sets the ring sizes. Set the same on every server:
// trimming happens as entries apply, so servers with different sizes keep
// different events (never different volumes or claims).
func WithEventRetention(r EventRetention) Option {
	return func(c *StoreConfig) {
		c.Retention = r
		if r.Global > 0 {
			c.MaxEvents = r.Global
		}
	}
}

func (s *Store) retention() EventRetention {
	r := s.cfg.Retention
	r.Global = s.cfg.MaxEvents
	if r.PerVolume <= 0 {
		r.PerVolume = DefaultEventsPerVolume
	}
	if r.Audit <= 0 {
		r.Audit = DefaultAuditEvents
	}
	if r.MaxVolumeEvents <= 0 {
		r.MaxVolumeEvents = DefaultMaxVolumeEvents
	}
	return r
}

// ringOf says which ring an event belongs to.
func ringOf(e *structs.Event) string {
	switch {
	case e.Type == structs.EventAudit:
		return ringAudit
	case e.VolumeID != "":
		return volumeRing(e.Namespace, e.VolumeID)
	}
	return ringGlobal
}

func volumeRing(ns, id string) string { return ringVolumePrefix + ns + "\x00" + id }

func isVolumeRing(r string) bool {
	return len(r) > len(ringVolumePrefix) && r[:len(ringVolumePrefix)] == ringVolumePrefix
}

func (r EventRetention) limit(ring string) int {
	switch {
	case ring == ringAudit:
		return r.Audit
	case isVolumeRing(ring):
		return r.PerVolume
	}
	return r.Global
}

// ringArg is the argument that matches exactly one ring on the ring index
// (appendRingName, keys.go): memdb's prefix lookup would otherwise let
// ring "v/ns/a" match "v/ns/ab".
func ringArg(ring string) string {
	return string(appendRingName(make([]byte, 0, ringNameLen(ring)), ring))
}

// event records an event at this write's index, in its ring. The last
// sequence number of the table is read from the table when the store
// does not know it (eventCounts.lastSeq), that of each ring once per
// transaction, and then counted on: a batch of checkpoints writes several
// events, and each read was a radix walk with its watch channel lookups
// (BenchmarkReleaseWrites). What the store knows is what the table holds,
// so a server that restored this state numbers the next event as one that
// applied it: a trim deletes the oldest events of a ring and keeps at
// least one (every limit is at least 1), so the table's last row is always
// the last one written.
func (w *writer) event(e *structs.Event) error {
	e.Index = w.index
	if e.Time.IsZero() {
		e.Time = w.now
	}
	if !w.seqKnown {
		last, err := w.txn.Last(TableEvents, indexID)
		if err != nil {
			return fmt.Errorf("read last event: %w", err)
		}
		w.lastSeq = 0 // an empty table: what the store knew before is gone
		if last != nil {
			w.lastSeq = last.(*eventRow).Seq
		}
		w.seqKnown = true
	}
	ring := ringOf(e)
	lastRingSeq, known := w.rings[ring]
	if !known {
		// A ring this transaction has not written to is as it was before
		// the transaction, unless the transaction deleted events (only
		// the trim does, after the last event): read there, not through
		// the events table this transaction modified, whose read would
		// drop the ring index's writable-node cache (own_rows.go).
		from := w.txn
		if o := w.snap.own; o != nil && !w.trimmed {
			from = o.base
		}
		lastInRing, err := from.Last(TableEvents, indexRing+"_prefix", ringArg(ring))
		if err != nil {
			return fmt.Errorf("read last event of ring: %w", err)
		}
		if ownRowsCheck && from != w.txn {
			if want, _ := w.txn.Last(TableEvents, indexRing+"_prefix", ringArg(ring)); want != lastInRing {
				panic(fmt.Sprintf("ownRows check: ring %q ends at %v before the transaction, at %v in it", ring, lastInRing, want))
			}
		}
		if lastInRing != nil {
			last := lastInRing.(*eventRow)
			// Its name too: one copy per ring, not one per event
			// (event_share.go).
			lastRingSeq, ring = last.RingSeq, last.Ring
		}
	}
	row := &eventRow{Seq: w.lastSeq + 1, Index: w.index, Ring: ring, RingSeq: lastRingSeq + 1, Event: e}
	shareEvent(row, intern, w.eventFields)
	if err := w.insert(TableEvents, row); err != nil {
		return err
	}
	w.lastSeq = row.Seq
	if w.rings == nil {
		w.rings = map[string]uint64{}
	}
	w.rings[ring] = row.RingSeq
	w.events++
	if isVolumeRing(ring) {
		w.volEvents++
	}
	return nil
}

// trimEvents trims every ring written to to its bound, then all volume
// rings together to MaxVolumeEvents. Ring sequence numbers are contiguous,
// so everything at or below last-limit goes.
func (w *writer) trimEvents() error {
	for ring, lastSeq := range w.rings {
		// lastSeq is the ring's newest event, written by this transaction.
		limit := uint64(w.retention.limit(ring))
		if lastSeq <= limit {
			continue
		}
		cutoff := lastSeq - limit
		it, err := w.txn.Get(TableEvents, indexRing+"_prefix", ringArg(ring))
		if err != nil {
			return fmt.Errorf("read events: %w", err)
		}
		var old []*eventRow
		for raw := it.Next(); raw != nil; raw = it.Next() {
			if raw.(*eventRow).RingSeq > cutoff {
				break
			}
			old = append(old, raw.(*eventRow))
		}
		if err := w.deleteEvents(old); err != nil {
			return err
		}
	}
	if w.volEvents <= w.retention.MaxVolumeEvents {
		return nil
	}
	// Oldest volume events first, whichever volume they belong to, read
	// from where the last trim left off: the events of no volume older
	// than them (the audit and global rings, 20,000 by default, kept far
	// longer than volume events past the cap) were read again at every
	// write, 1 ms an entry on every server (BenchmarkVolumeEventsCapBehindOldEvents).
	it, err := w.txn.LowerBound(TableEvents, indexID, w.volFrom)
	if err != nil {
		return fmt.Errorf("read events: %w", err)
	}
	var old []*eventRow
	excess := w.volEvents - w.retention.MaxVolumeEvents + volumeTrimBatch(w.retention.MaxVolumeEvents)
	for raw := it.Next(); raw != nil && len(old) < excess; raw = it.Next() {
		if r := raw.(*eventRow); isVolumeRing(r.Ring) {
			old = append(old, r)
		}
	}
	if err := w.deleteEvents(old); err != nil {
		return err
	}
	if len(old) > 0 {
		// Every volume event at or below the last one deleted is gone,
		// and new ones come after every event there is.
		w.volFrom = old[len(old)-1].Seq + 1
	}
	return nil
}

// volumeTrimBatch is how far below MaxVolumeEvents a trim goes: a 64th of
// it. Trimmed to the cap exactly, a store past it (a 1,000,000-volume
// cluster's 100,000 claims and releases write 500,000 volume events
// against the default 200,000) deleted one event with every event it
// wrote: three index paths copied and the trim's scan begun again in
// every claim transition's entry, on every server, 14% of a claim's store
// CPU (BenchmarkClaimCycleEventsCap). In batches the deletes share their
// paths, and one entry in 3,125 pays for them. A cap under 64 is kept
// exactly.
func volumeTrimBatch(maxVolumeEvents int) int { return maxVolumeEvents / 64 }

func (w *writer) deleteEvents(rows []*eventRow) error {
	if len(rows) > 0 {
		w.trimmed = true
	}
	for _, r := range rows {
		if err := w.delete(TableEvents, r); err != nil {
			return err
		}
		if isVolumeRing(r.Ring) {
			w.volEvents--
		}
	}
	return nil
}

// eventCounts is what the store derives from its events table and keeps
// between writes, under its write lock: copied into each write and back
// once it commits, derived again when a restore replaces the table. None
// of it is persisted.
type eventCounts struct {
	// volEvents counts the events in volume rings.
	volEvents int
	// lastSeq is the table's last sequence number when seqKnown: a write
	// with events read it from the table once per transaction, a reverse
	// iterator and its stack each time, 2.5% of the bytes a claim and its
	// release allocate in the store (BENCHMARKS.md "A leaf allocated with
	// its node, and the events' last number kept").
	lastSeq  uint64
	seqKnown bool
	// volFrom is a sequence number no volume event is below: where the
	// trim of all volume rings together starts reading (trimEvents).
	volFrom uint64
}

// derivedEvents is db's eventCounts as a restore starts them: the volume
// events counted, the rest to be read when first needed.
func derivedEvents(db *memdb.MemDB) eventCounts {
	return eventCounts{volEvents: countVolumeEvents(db)}
}

// countVolumeEvents recounts the volume-ring events of a database (after a
// restore: the count is derived state, never persisted).
func countVolumeEvents(db *memdb.MemDB) int {
	it, err := db.Txn(false).Get(TableEvents, indexID)
	if err != nil {
		return 0
	}
	n := 0
	for raw := it.Next(); raw != nil; raw = it.Next() {
		if isVolumeRing(raw.(*eventRow).Ring) {
			n++
		}
	}
	return n
}

// ringCounter places event rows read back in sequence order in their
// rings: rows of snapshots written before rings existed get their ring and
// the next ring sequence number, newer rows keep theirs.
type ringCounter map[string]uint64

func (c ringCounter) place(r *eventRow) {
	if r.Ring == "" && r.Event != nil {
		r.Ring = ringOf(r.Event)
	}
	if r.RingSeq == 0 {
		r.RingSeq = c[r.Ring] + 1
	}
	c[r.Ring] = max(c[r.Ring], r.RingSeq)
}

// EventFilter selects events for EventsFiltered. Zero fields match all.
type EventFilter struct {
	// Namespace and VolumeID select one volume's ring.
	Namespace, VolumeID string
	Type                string
	// SinceIndex keeps events with a raft index above it.
	SinceIndex uint64
	// After and Before bound the event time (After inclusive, Before
	// exclusive).
	After, Before time.Time
	// FromSeq starts at this sequence number (a page token).
	FromSeq uint64
	// Limit stops after this many events (0: no limit); the returned
	// next sequence is then the first event left out.
	Limit int
	// Visible, when set, keeps only the events it allows (the caller's
	// ACL): applied before Limit, so a page is full of what it may see.
	Visible func(*structs.Event) bool
}

// EventEntry is an event with its sequence number (the page token).
type EventEntry struct {
	Seq   uint64
	Event *structs.Event
}

// EventsFiltered lists the events f selects, oldest first, and the
// sequence number of the next match when Limit cut the list (0: none).
func (snap *Snapshot) EventsFiltered(ws memdb.WatchSet, f EventFilter) ([]EventEntry, uint64, error) {
	if ws != nil {
		ch, _, err := snap.txn.FirstWatch(TableIndex, indexID, TableEvents)
		if err != nil {
			return nil, 0, fmt.Errorf("read index of %s: %w", TableEvents, err)
		}
		ws.Add(ch)
	}
	var it memdb.ResultIterator
	var err error
	byType := false
	switch {
	case f.VolumeID != "":
		// One volume: its ring only, never a scan of the whole table.
		it, err = snap.txn.Get(TableEvents, indexRing+"_prefix", ringArg(volumeRing(f.Namespace, f.VolumeID)))
	case f.Type == structs.EventAudit:
		it, err = snap.txn.Get(TableEvents, indexRing+"_prefix", ringArg(ringAudit))
	case f.Type != "" && typeIndexed(f.Type):
		// That type's events alone, from FromSeq (event_types.go); the
		// walk ends at the first event of another type.
		byType = true
		it, err = snap.txn.LowerBound(TableEvents, indexType, f.Type, max(f.FromSeq, 1))
	default:
		it, err = snap.txn.LowerBound(TableEvents, indexID, max(f.FromSeq, 1))
	}
	if err != nil {
		return nil, 0, fmt.Errorf("read events: %w", err)
	}
	var out []EventEntry
	for raw := it.Next(); raw != nil; raw = it.Next() {
		r := raw.(*eventRow)
		e := r.Event
		if byType && e.Type != f.Type {
			break
		}
		switch {
		case r.Seq < f.FromSeq, r.Index <= f.SinceIndex,
			f.Type != "" && e.Type != f.Type,
			!f.After.IsZero() && e.Time.Before(f.After),
			!f.Before.IsZero() && !e.Time.Before(f.Before),
			f.Visible != nil && !f.Visible(e):
			continue
		}
		if f.Limit > 0 && len(out) == f.Limit {
			return out, r.Seq, nil
		}
		out = append(out, EventEntry{Seq: r.Seq, Event: e})
	}
	return out, 0, nil
}
