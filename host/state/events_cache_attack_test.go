package state

// The store's kept event numbers (Store.events: eventCounts),
// tested by a helper who attacked them: a store that applied every entry
// and one that restored a snapshot at any cut and applied the rest must
// hold the same events (seq, ring seq, message) and the same Digest, and
// the events kept must be what a full scan from the oldest event keeps.
// It found rings whose names extend another's (an event's volume ID is
// the caller's, zero bytes included) trimmed together, which the kept
// number turned into two servers numbering events apart: the ring index's
// keys are prefix-free since (appendRingName, keys.go).

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/volhost/volhost/host/structs"
)

// Test-only message types, registered in ops: a write that records its
// events and then fails (before finish), one that also trims before it
// fails (as a failure in finish after the trim would), and a valid write
// with no event.
const (
	atkFailType          structs.MessageType = 240
	atkFailAfterTrimType structs.MessageType = 241
	atkNoopType          structs.MessageType = 242
)

var errAtkInjected = errors.New("attack: injected failure mid-apply")

func init() {
	okValidate := func(*Snapshot, any) error { return nil }
	ops[atkFailType] = op{validate: okValidate, apply: func(w *writer, req any) (any, error) {
		if _, err := w.appendEvents(req.(*structs.EventAppendRequest)); err != nil {
			return nil, err
		}
		return nil, errAtkInjected
	}}
	ops[atkFailAfterTrimType] = op{validate: okValidate, apply: func(w *writer, req any) (any, error) {
		if _, err := w.appendEvents(req.(*structs.EventAppendRequest)); err != nil {
			return nil, err
		}
		if err := w.trimEvents(); err != nil {
			return nil, err
		}
		return nil, errAtkInjected
	}}
	ops[atkNoopType] = op{validate: okValidate, apply: func(*writer, any) (any, error) { return nil, nil }}
}

// atkStep is one log entry; wantErr says whether applying it must fail.
type atkStep struct {
	t       structs.MessageType
	req     any
	wantErr bool
	desc    string
}

const atkBaseIndex = 1000 // past the base data's indexes (newFixture)

func atkTime(idx uint64) time.Time { return t0.Add(time.Duration(idx) * time.Second) }

// atkApply applies step i (raft index atkBaseIndex+i+1) and checks the
// error is the expected one.
func atkApply(t *testing.T, s *Store, i int, st atkStep) {
	t.Helper()
	idx := uint64(atkBaseIndex + i + 1)
	_, err := s.ApplyAt(idx, atkTime(idx), st.t, st.req)
	if (err != nil) != st.wantErr {
		t.Fatalf("step %d (%s): err %v, want error %v", i, st.desc, err, st.wantErr)
	}
}

func atkApplyAll(t *testing.T, s *Store, steps []atkStep, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		atkApply(t, s, i, steps[i])
	}
}

func atkPersist(t *testing.T, s *Store) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := s.Persist(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func atkRestore(t *testing.T, s *Store, snap []byte) {
	t.Helper()
	if err := s.Restore(bytes.NewReader(snap)); err != nil {
		t.Fatal(err)
	}
}

func atkDigest(t *testing.T, s *Store) string {
	t.Helper()
	d, err := s.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// atkRow is an event row as the model and the dumps see it.
type atkRow struct {
	seq, rs, idx uint64
	ring, msg    string
}

func (r atkRow) String() string {
	return fmt.Sprintf("%d:%q#%d@%d:%s", r.seq, strings.ReplaceAll(r.ring, "\x00", "/"), r.rs, r.idx, r.msg)
}

// atkRows reads the events table of s in sequence order.
func atkRows(t *testing.T, s *Store) []atkRow {
	t.Helper()
	it, err := s.cur.Load().db.Txn(false).Get(TableEvents, indexID)
	if err != nil {
		t.Fatal(err)
	}
	var out []atkRow
	for raw := it.Next(); raw != nil; raw = it.Next() {
		r := raw.(*eventRow)
		out = append(out, atkRow{seq: r.Seq, rs: r.RingSeq, idx: r.Index, ring: r.Ring, msg: r.Event.Message})
	}
	return out
}

func atkDump(rows []atkRow) string {
	var b strings.Builder
	for _, r := range rows {
		b.WriteString(r.String())
		b.WriteByte(' ')
	}
	return b.String()
}

// atkModel is the events table as the rules say it must be: a full scan
// from the oldest event, numbers from the table's last row.
type atkModel struct {
	ret  EventRetention // resolved
	rows []atkRow
}

func (m *atkModel) apply(idx uint64, evs []*structs.Event) {
	var lastSeq uint64
	if len(m.rows) > 0 {
		lastSeq = m.rows[len(m.rows)-1].seq
	}
	written := map[string]uint64{}
	for _, e := range evs {
		ring := ringOf(e)
		rs, ok := written[ring]
		if !ok {
			for _, r := range m.rows {
				if r.ring == ring {
					rs = max(rs, r.rs)
				}
			}
		}
		rs++
		lastSeq++
		m.rows = append(m.rows, atkRow{seq: lastSeq, rs: rs, idx: idx, ring: ring, msg: e.Message})
		written[ring] = rs
	}
	for ring, last := range written {
		limit := uint64(m.ret.limit(ring))
		if last <= limit {
			continue
		}
		m.rows = slices.DeleteFunc(m.rows, func(r atkRow) bool { return r.ring == ring && r.rs <= last-limit })
	}
	vol := 0
	for _, r := range m.rows {
		if isVolumeRing(r.ring) {
			vol++
		}
	}
	if excess := vol - m.ret.MaxVolumeEvents; excess > 0 {
		m.rows = slices.DeleteFunc(m.rows, func(r atkRow) bool {
			if excess > 0 && isVolumeRing(r.ring) {
				excess--
				return true
			}
			return false
		})
	}
}

// step applies an atkStep to the model (an event append that succeeds).
func (m *atkModel) step(i int, st atkStep) {
	if st.wantErr || st.t != structs.EventAppendType {
		return
	}
	m.apply(uint64(atkBaseIndex+i+1), st.req.(*structs.EventAppendRequest).Events)
}

// --- random generation ---

var atkVolumes = []struct{ ns, id string }{
	{"default", "a"}, {"default", "b"}, {"default", "c"}, {"ns2", "a"}, {"default", "ab"}, {"default", "d"},
}

func atkEvent(rng *rand.Rand, msg string) *structs.Event {
	v := atkVolumes[rng.IntN(len(atkVolumes))]
	switch k := rng.IntN(20); {
	case k < 10:
		return &structs.Event{Type: structs.EventClaimTransition, Namespace: v.ns, VolumeID: v.id, Message: msg}
	case k < 12:
		return &structs.Event{Type: structs.EventClaimFailed, Namespace: v.ns, VolumeID: v.id, Message: msg}
	case k < 14:
		return &structs.Event{Type: structs.EventAudit, Message: msg}
	case k < 15:
		// An audit event naming a volume: the audit ring.
		return &structs.Event{Type: structs.EventAudit, Namespace: v.ns, VolumeID: v.id, Message: msg}
	case k < 18:
		return &structs.Event{Type: structs.EventModule, Message: msg}
	default:
		return &structs.Event{Type: structs.EventNodeStatus, NodeID: "n1", Message: msg}
	}
}

func atkEvents(rng *rand.Rand, tag string) []*structs.Event {
	n := 1 + rng.IntN(4)
	if rng.IntN(6) == 0 {
		n = 5 + rng.IntN(10) // more than the small caps
	}
	evs := make([]*structs.Event, n)
	for i := range evs {
		evs[i] = atkEvent(rng, fmt.Sprintf("%s-%d", tag, i))
	}
	return evs
}

func atkSteps(rng *rand.Rand, n int, tag string) []atkStep {
	steps := make([]atkStep, n)
	for i := range steps {
		name := fmt.Sprintf("%s%d", tag, i)
		evs := atkEvents(rng, name)
		switch k := rng.IntN(100); {
		case k < 72:
			steps[i] = atkStep{t: structs.EventAppendType, req: &structs.EventAppendRequest{Events: evs}, desc: "append " + name}
		case k < 80:
			bad := slices.Clone(evs)
			bad = slices.Insert(bad, rng.IntN(len(bad)+1), &structs.Event{Message: name + "-untyped"})
			steps[i] = atkStep{t: structs.EventAppendType, req: &structs.EventAppendRequest{Events: bad}, wantErr: true, desc: "invalid " + name}
		case k < 88:
			steps[i] = atkStep{t: atkFailType, req: &structs.EventAppendRequest{Events: evs}, wantErr: true, desc: "fail " + name}
		case k < 95:
			steps[i] = atkStep{t: atkFailAfterTrimType, req: &structs.EventAppendRequest{Events: evs}, wantErr: true, desc: "fail after trim " + name}
		default:
			steps[i] = atkStep{t: atkNoopType, req: &struct{}{}, desc: "noop " + name}
		}
	}
	return steps
}

func atkRetention(rng *rand.Rand) EventRetention {
	pick := func(xs ...int) int { return xs[rng.IntN(len(xs))] }
	return EventRetention{
		PerVolume:       pick(0, 1, 2, 3, 5, 8),
		Global:          pick(0, 1, 2, 4),
		Audit:           pick(0, 1, 2, 3),
		MaxVolumeEvents: pick(0, 1, 2, 3, 5, 7, 12),
	}
}

// atkSeqs records every sequence number a store ever held with its
// message: a number must never name two events in one store.
type atkSeqs map[uint64]string

func (m atkSeqs) check(t *testing.T, what string, rows []atkRow) {
	t.Helper()
	for _, r := range rows {
		if old, ok := m[r.seq]; ok && old != r.msg {
			t.Fatalf("%s: sequence number %d reused: was %q, now %q", what, r.seq, old, r.msg)
		}
		m[r.seq] = r.msg
	}
}

// TestRestoredStoresKeepTheEventsOfRandomWrites: seeded rounds of random event writes
// (valid, refused, failing mid-apply, failing after their trim, none)
// under small retentions. Each round checks, after every step, the store
// that applied everything against the model and against a store that
// restores its own snapshot before every write (so knows nothing between
// writes: the table's last row, a trim from the oldest event); then that
// restores at random cuts (into a store with its own events, after a newer
// snapshot, after an empty one, twice) end with the same Digest; then a
// restore under another retention, against the model and a chain of two
// restores.
func TestRestoredStoresKeepTheEventsOfRandomWrites(t *testing.T) {
	const rounds = 40
	for round := range rounds {
		seed := uint64(round)*7919 + 17
		rng := rand.New(rand.NewPCG(seed, 99))
		ret := atkRetention(rng)
		n := 20 + rng.IntN(50)
		steps := atkSteps(rng, n, "s")
		ok := t.Run(fmt.Sprintf("round%d-%+v", round, ret), func(t *testing.T) {
			all := NewStore(WithEventRetention(ret))
			ref := NewStore(WithEventRetention(ret))
			m := &atkModel{ret: all.retention()}
			seqs := atkSeqs{}
			snaps := [][]byte{atkPersist(t, all)}
			for i, st := range steps {
				atkApply(t, all, i, st)
				// ref forgets what it knew: restore its own state first.
				atkRestore(t, ref, atkPersist(t, ref))
				atkApply(t, ref, i, st)
				m.step(i, st)
				rows := atkRows(t, all)
				seqs.check(t, fmt.Sprintf("step %d", i), rows)
				if got, want := atkDump(rows), atkDump(m.rows); got != want {
					t.Fatalf("step %d (%s): events\n%s\nthe model keeps\n%s", i, st.desc, got, want)
				}
				if got, want := atkDump(atkRows(t, ref)), atkDump(rows); got != want {
					t.Fatalf("step %d (%s): a store that knew nothing between writes\n%s\nthe store that kept its numbers\n%s", i, st.desc, got, want)
				}
				snaps = append(snaps, atkPersist(t, all))
			}
			want := atkDigest(t, all)
			wantRows := atkDump(atkRows(t, all))
			empty := atkPersist(t, NewStore())

			cuts := []int{0, n}
			for range 8 {
				cuts = append(cuts, rng.IntN(n+1))
			}
			for _, c := range cuts {
				variant := rng.IntN(5)
				r := NewStore(WithEventRetention(ret))
				switch variant {
				case 0: // a store with events of its own
					for i, st := range atkSteps(rng, 1+rng.IntN(15), "junk") {
						if !st.wantErr {
							atkApply(t, r, i, st)
						}
					}
					atkRestore(t, r, snaps[c])
				case 1: // a newer state, then the older snapshot
					c2 := c + rng.IntN(n-c+1)
					atkRestore(t, r, snaps[c2])
					atkApplyAll(t, r, steps, c2, min(n, c2+rng.IntN(5)))
					atkRestore(t, r, snaps[c])
				case 2: // an empty store's snapshot, some writes, then the cut
					atkRestore(t, r, empty)
					atkApplyAll(t, r, steps, 0, rng.IntN(n+1))
					atkRestore(t, r, snaps[c])
				case 3: // restored twice
					atkRestore(t, r, snaps[c])
					atkRestore(t, r, snaps[c])
				default: // restored at the cut, restored again further on
					atkRestore(t, r, snaps[c])
					c2 := c + rng.IntN(n-c+1)
					atkApplyAll(t, r, steps, c, c2)
					atkRestore(t, r, atkPersist(t, r))
					c = c2
				}
				atkApplyAll(t, r, steps, c, n)
				if got := atkDump(atkRows(t, r)); got != wantRows {
					t.Fatalf("restored at %d (variant %d): events\n%s\nthe store that applied everything\n%s", c, variant, got, wantRows)
				}
				if got := atkDigest(t, r); got != want {
					t.Fatalf("restored at %d (variant %d): digest %s, want %s", c, variant, got, want)
				}
			}

			// Another retention after a restart: the restored state is
			// over the new caps until its first trim.
			ret2 := atkRetention(rng)
			c := rng.IntN(n + 1)
			b := NewStore(WithEventRetention(ret2))
			atkRestore(t, b, snaps[c])
			m2 := &atkModel{ret: b.retention(), rows: atkRows(t, b)}
			seqs2 := atkSeqs{}
			for i := c; i < n; i++ {
				atkApply(t, b, i, steps[i])
				m2.step(i, steps[i])
				rows := atkRows(t, b)
				seqs2.check(t, fmt.Sprintf("retention %+v, step %d", ret2, i), rows)
				if got, want := atkDump(rows), atkDump(m2.rows); got != want {
					t.Fatalf("retention %+v after a restore at %d, step %d (%s): events\n%s\nthe model keeps\n%s", ret2, c, i, steps[i].desc, got, want)
				}
			}
			d := NewStore(WithEventRetention(ret2))
			atkRestore(t, d, snaps[c])
			mid := c + rng.IntN(n-c+1)
			atkApplyAll(t, d, steps, c, mid)
			e := NewStore(WithEventRetention(ret2))
			atkRestore(t, e, atkPersist(t, d))
			atkApplyAll(t, e, steps, mid, n)
			if got, want := atkDigest(t, e), atkDigest(t, b); got != want {
				t.Fatalf("retention %+v: restored at %d, again at %d: events\n%s\nrestored at %d only\n%s",
					ret2, c, mid, atkDump(atkRows(t, e)), c, atkDump(atkRows(t, b)))
			}
		})
		if !ok {
			t.Logf("round %d seed %d failed", round, seed)
			return
		}
	}
}

// atkCheckCuts applies steps to a store that starts from base (a
// snapshot), keeping a snapshot after each step, then for every cut
// restores a fresh store (opts) there and applies the rest: its events and
// Digest must be the first store's. It also checks, after every step, the
// first store against one that restores its own state before each write
// (so knows nothing between writes).
func atkCheckCuts(t *testing.T, base []byte, steps []atkStep, opts ...Option) {
	t.Helper()
	all, ref := NewStore(opts...), NewStore(opts...)
	atkRestore(t, all, base)
	atkRestore(t, ref, base)
	snaps := [][]byte{atkPersist(t, all)}
	seqs := atkSeqs{}
	for i, st := range steps {
		atkApply(t, all, i, st)
		seqs.check(t, fmt.Sprintf("step %d (%s)", i, st.desc), atkRows(t, all))
		atkRestore(t, ref, atkPersist(t, ref))
		atkApply(t, ref, i, st)
		if got, want := atkDump(atkRows(t, ref)), atkDump(atkRows(t, all)); got != want {
			t.Errorf("step %d (%s): a store that knew nothing between writes\n%s\nthe store that applied everything\n%s", i, st.desc, got, want)
		}
		snaps = append(snaps, atkPersist(t, all))
	}
	want, wantRows := atkDigest(t, all), atkDump(atkRows(t, all))
	for c := range snaps {
		r := NewStore(opts...)
		atkRestore(t, r, snaps[c])
		atkApplyAll(t, r, steps, c, len(steps))
		if got := atkDump(atkRows(t, r)); got != wantRows {
			t.Errorf("restored after step %d: events\n%s\nthe store that applied everything\n%s", c, got, wantRows)
		} else if got := atkDigest(t, r); got != want {
			t.Errorf("restored after step %d: digest %s, want %s", c, got, want)
		}
	}
}

// The writes of the store itself, not only event appends: claims, alloc
// updates, a checkpoint batch with refused checkpoints, a refused
// checkpoint, ACL writes (audit events), a forced deregister, under caps
// smaller than one write's events.
func TestRestoredStoresKeepTheEventsOfTheStoresWrites(t *testing.T) {
	for _, ret := range []EventRetention{
		{PerVolume: 1, Global: 1, Audit: 1, MaxVolumeEvents: 1},
		{PerVolume: 2, Global: 2, Audit: 2, MaxVolumeEvents: 3},
		{PerVolume: 3, MaxVolumeEvents: 2},
		{},
	} {
		t.Run(fmt.Sprintf("%+v", ret), func(t *testing.T) {
			f := newFixture(t, WithEventRetention(ret))
			base := atkPersist(t, f.s)
			var steps []atkStep
			// rec applies a request to the leader (f) and records it.
			rec := func(desc string, typ structs.MessageType, req any, wantErr bool) {
				t.Helper()
				st := atkStep{t: typ, req: req, wantErr: wantErr, desc: desc}
				atkApply(t, f.s, len(steps), st)
				steps = append(steps, st)
			}
			claim := func(vol, alloc string, mode structs.ClaimMode) {
				a := f.alloc(alloc)
				rec("claim "+vol+" "+alloc, structs.VolumeClaimType, &structs.VolumeClaimRequest{Namespace: "default", VolumeID: vol,
					Claim: &structs.Claim{AllocID: alloc, NodeID: a.NodeID, Mode: mode, ExternalNodeID: "ext-" + a.NodeID}}, false)
			}
			setAlloc := func(id string, cs structs.AllocClientStatus) {
				a := f.alloc(id).Copy()
				a.ClientStatus = cs
				rec("alloc "+id, structs.AllocUpsertType, &structs.AllocUpsertRequest{Allocs: []*structs.Alloc{a}}, false)
			}
			ck := func(vol, alloc string, cs structs.ClaimState) *structs.ClaimCheckpointRequest {
				c := f.volume("default", vol).Claims[alloc].Copy()
				c.State = cs
				return &structs.ClaimCheckpointRequest{Namespace: "default", VolumeID: vol, Claim: c}
			}
			appendEv := func(desc string, evs ...*structs.Event) {
				rec(desc, structs.EventAppendType, &structs.EventAppendRequest{Events: evs}, false)
			}
			appendEv("audit+module", &structs.Event{Type: structs.EventAudit, Message: "old audit"}, &structs.Event{Type: structs.EventModule, Message: "old module"})
			claim("vol-sw", "a1", structs.ClaimWrite)
			claim("vol-mw", "a2", structs.ClaimWrite)
			claim("vol-ms", "a5", structs.ClaimWrite)
			appendEv("vol events", volEvent("vol-sw", "x1"), volEvent("vol-mw", "x2"), volEvent("other", "x3"))
			setAlloc("a1", structs.AllocComplete)
			setAlloc("a2", structs.AllocComplete)
			unknown := ck("vol-sw", "a1", structs.ClaimNodeDetached)
			unknown.Claim = unknown.Claim.Copy()
			unknown.Claim.AllocID = "no-such-alloc"
			rec("batch", structs.ClaimCheckpointBatchType, &structs.ClaimCheckpointBatchRequest{Checkpoints: []*structs.ClaimCheckpointRequest{
				ck("vol-sw", "a1", structs.ClaimNodeDetached),
				ck("vol-ms", "a5", structs.ClaimNodeDetached), // alloc running: refused
				unknown, // no such claim: refused
				ck("vol-mw", "a2", structs.ClaimNodeDetached),
				ck("vol-sw", "a1", structs.ClaimControllerDetached),
				ck("vol-sw", "a1", structs.ClaimTaken), // backwards: refused
			}}, false)
			rec("refused checkpoint", structs.ClaimCheckpointType, ck("vol-ms", "a5", structs.ClaimNodeDetached), true)
			rec("refused append", structs.EventAppendType, &structs.EventAppendRequest{Events: []*structs.Event{volEvent("vol-sw", "r"), {Message: "untyped"}}}, true)
			rec("acl bootstrap", structs.ACLBootstrapType, &structs.ACLBootstrapRequest{Token: &structs.ACLToken{
				AccessorID: "boot", SecretHash: hashA, Type: structs.ACLManagementToken}}, false)
			rec("acl policy", structs.ACLPolicyUpsertType, &structs.ACLPolicyUpsertRequest{Actor: "boot",
				Policies: []*structs.ACLPolicy{{Name: "ops", Rules: `operator { policy = "read" }`}}}, false)
			rec("acl token", structs.ACLTokenUpsertType, &structs.ACLTokenUpsertRequest{Actor: "boot",
				Tokens: []*structs.ACLToken{{AccessorID: "t1", SecretHash: hashB, Type: structs.ACLClientToken, Policies: []string{"ops"}}}}, false)
			rec("fail mid-apply", atkFailType, &structs.EventAppendRequest{Events: []*structs.Event{volEvent("vol-sw", "lost1"), volEvent("z", "lost2")}}, true)
			rec("fail after trim", atkFailAfterTrimType, &structs.EventAppendRequest{Events: []*structs.Event{volEvent("vol-mw", "lost3"), volEvent("vol-mw", "lost4"), volEvent("vol-mw", "lost5")}}, true)
			rec("batch 2", structs.ClaimCheckpointBatchType, &structs.ClaimCheckpointBatchRequest{Checkpoints: []*structs.ClaimCheckpointRequest{
				ck("vol-sw", "a1", structs.ClaimReadyToFree),
				ck("vol-ms", "a5", structs.ClaimNodeDetached), // refused
				ck("vol-mw", "a2", structs.ClaimControllerDetached),
			}}, false)
			claim("vol-snr", "a4", structs.ClaimRead)
			appendEv("many", volEvent("p", "p1"), volEvent("q", "q1"), volEvent("p", "p2"), &structs.Event{Type: structs.EventAudit, Message: "a"}, volEvent("q", "q2"))
			setAlloc("a5", structs.AllocComplete)
			rec("force deregister", structs.VolumeDeregisterType, &structs.VolumeDeregisterRequest{Namespace: "default", VolumeID: "vol-ms", Force: true, Reason: "operator", Time: t0}, false)
			appendEv("last", volEvent("vol-sw", "end"))
			atkCheckCuts(t, base, steps, WithEventRetention(ret))
		})
	}
}

// Targeted: a store restored at a cut that left its counters where an
// applying store's trims moved them: the volume cap trimmed every write
// for a while, then the audit/global rings trim, then a write with no
// volume event, then volume events again, with MaxVolumeEvents smaller
// than one write's volume events.
func TestRestoredStoresKeepTheEventsOfVolumeCapTrims(t *testing.T) {
	mod := func(m string) *structs.Event { return &structs.Event{Type: structs.EventModule, Message: m} }
	aud := func(m string) *structs.Event { return &structs.Event{Type: structs.EventAudit, Message: m} }
	app := func(desc string, evs ...*structs.Event) atkStep {
		return atkStep{t: structs.EventAppendType, req: &structs.EventAppendRequest{Events: evs}, desc: desc}
	}
	steps := []atkStep{
		app("1", mod("g1"), aud("au1"), volEvent("a", "a1")),
		app("2", volEvent("b", "b1"), volEvent("c", "c1"), volEvent("a", "a2"), volEvent("d", "d1")),
		app("3", mod("g2"), mod("g3"), mod("g4")),
		{t: atkFailAfterTrimType, req: &structs.EventAppendRequest{Events: []*structs.Event{volEvent("a", "x1"), volEvent("a", "x2"), volEvent("b", "x3")}}, wantErr: true, desc: "fail after trim"},
		app("4", volEvent("e", "e1")),
		{t: atkNoopType, req: &struct{}{}, desc: "noop"},
		app("5", aud("au2"), aud("au3")),
		app("6", volEvent("a", "a3"), mod("g5"), volEvent("b", "b2"), volEvent("b", "b3"), volEvent("b", "b4")),
		app("7", volEvent("f", "f1")),
		{t: atkFailType, req: &structs.EventAppendRequest{Events: []*structs.Event{volEvent("a", "y1")}}, wantErr: true, desc: "fail"},
		app("8", mod("g6")),
		app("9", volEvent("a", "a4"), volEvent("c", "c2")),
	}
	empty := atkPersist(t, NewStore())
	for _, ret := range []EventRetention{
		{PerVolume: 1, Global: 1, Audit: 1, MaxVolumeEvents: 1},
		{PerVolume: 2, Global: 2, Audit: 1, MaxVolumeEvents: 2},
		{PerVolume: 10, Global: 10, Audit: 10, MaxVolumeEvents: 3},
		{MaxVolumeEvents: 1},
	} {
		t.Run(fmt.Sprintf("%+v", ret), func(t *testing.T) {
			atkCheckCuts(t, empty, steps, WithEventRetention(ret))
		})
	}
}

// A ring's trim reads the ring by prefix (ringArg). With memdb's key (the
// name and a zero byte) this failed. An event's namespace and volume ID
// are not validated (an
// EventAppend from a module, the audit log or a scheduler's sync carries
// them as sent), so a volume ID holding a zero byte names a ring whose
// keys fall inside another ring's prefix: volume "x\x00!" of namespace
// "default" is ring "v\x00default\x00x\x00!", inside the prefix of volume
// "x", "v\x00default\x00x\x00", and its keys sort before x's own
// ('!' < '0'). A write of x's event and then of the other volume's event
// trims ring x, and that trim deletes the other ring's event just written:
// the table's last row is then not the last event written, against what
// eventCounts.lastSeq assumes. A store that applied the write numbers the
// next event after the deleted one; a store that restored a snapshot
// taken after it reads the table's last row and numbers it one lower.
// Before the store kept the number (0bdc615) every store read the table's
// last row, so all numbered alike (this test passes there).
func TestARingWhoseNameExtendsAnothersIsTrimmedAlone(t *testing.T) {
	other := &structs.Event{Type: structs.EventClaimTransition, Namespace: "default", VolumeID: "x\x00!", Message: "other ring"}
	app := func(desc string, evs ...*structs.Event) atkStep {
		return atkStep{t: structs.EventAppendType, req: &structs.EventAppendRequest{Events: evs}, desc: desc}
	}
	steps := []atkStep{
		app("x1", volEvent("x", "x1")),
		app("x2", volEvent("x", "x2")),
		app("x3 then the other ring", volEvent("x", "x3"), other),
		app("after", &structs.Event{Type: structs.EventModule, Message: "after"}),
		app("after2", volEvent("x", "x4")),
	}
	empty := atkPersist(t, NewStore())
	ret := EventRetention{PerVolume: 1}
	// The write itself is accepted.
	s := NewStore(WithEventRetention(ret))
	atkApplyAll(t, s, steps, 0, 3)
	t.Logf("after the write: events %s; the store's last sequence number %d (known %v)", atkDump(atkRows(t, s)), s.events.lastSeq, s.events.seqKnown)
	atkCheckCuts(t, empty, steps, WithEventRetention(ret))
}
