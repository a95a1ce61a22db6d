// Package state owns volhost's in-memory state store: a go-memdb database of
// volumes (with their claims), allocations, nodes, CSI plugins, leftovers, a
// bounded events table and a per-table raft index.
//
// Every write arrives through Store.Apply, which the replicated log's FSM
// calls with the raft index of the entry, so the store is a deterministic
// function of the log. Reads go through a Snapshot, a consistent memdb read
// transaction, and blocking queries (Store.BlockingQuery) wait on memdb watch
// channels until a table index moves past what the caller has seen.
//
// Validation is a pure function of a snapshot and a request
// (Snapshot.Validate), so the server refuses bad requests before they reach
// the log (not a committed refusal logged on every server without IDs, as
// in hashicorp/nomad#27324) and Apply refuses them again, atomically, at apply
// time.
package state

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-memdb"
	"github.com/jonboulle/clockwork"

	"github.com/volhost/volhost/host/structs"
)

const (
	// DefaultMaxEvents bounds the events table when no option says otherwise.
	DefaultMaxEvents = 10000
	// DefaultMaxWait is a blocking query's wait when the caller passes 0.
	DefaultMaxWait = 5 * time.Minute
	// MaxMaxWait caps a blocking query's wait, as the reference scheduler does.
	MaxMaxWait = 10 * time.Minute
)

// StoreConfig configures a Store; set it through Options.
type StoreConfig struct {
	// MaxEvents is how many events the events table keeps (the newest).
	MaxEvents int
	// Clock times blocking queries and stamps writes applied without an
	// explicit time (Store.Apply). Tests inject a clockwork.FakeClock.
	Clock clockwork.Clock
	// Logger is the store's logger (named "state").
	Logger hclog.Logger
	// Retention sizes the event rings (events.go); MaxEvents is its
	// global ring.
	Retention EventRetention
}

// Option changes the StoreConfig.
type Option func(*StoreConfig)

// WithMaxEvents bounds the events table to the newest n events (n > 0).
func WithMaxEvents(n int) Option { return func(c *StoreConfig) { c.MaxEvents = n } }

// WithClock sets the clock used by blocking queries and Store.Apply.
func WithClock(clk clockwork.Clock) Option { return func(c *StoreConfig) { c.Clock = clk } }

// WithLogger sets the parent logger; the store logs under the name "state".
func WithLogger(l hclog.Logger) Option { return func(c *StoreConfig) { c.Logger = l } }

// Store is the state store. Reads are safe from any goroutine; writes
// (Apply, Restore) are serialised internally.
type Store struct {
	cfg    StoreConfig
	logger hclog.Logger

	// writeMu serialises Apply and Restore: memdb allows one writer, and
	// Restore swaps the whole database.
	writeMu sync.Mutex
	cur     atomic.Pointer[dbState]
	// events is what the store derives from its events table and keeps
	// between writes (under writeMu; events.go).
	events eventCounts
	// eventFields shares equal maps of fields among the events written
	// (under writeMu; event_share.go).
	eventFields fieldsTable
	// generation counts the restores that replaced the whole state
	// (StateGeneration).
	generation atomic.Uint64
}

// StateGeneration moves every time a restore replaces the whole state. A
// table's index says nothing across a restore (the restored one may equal
// the index it replaced), so a cache of what a table held (compiled ACLs,
// host/acl) ends with the generation too.
func (s *Store) StateGeneration() uint64 { return s.generation.Load() }

// dbState pairs a database with the channel closed when Restore replaces it,
// so blocking queries on the old database wake up and rerun.
type dbState struct {
	db      *memdb.MemDB
	abandon chan struct{}
}

// NewStore returns an empty store.
func NewStore(opts ...Option) *Store {
	cfg := StoreConfig{MaxEvents: DefaultMaxEvents}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.MaxEvents <= 0 {
		cfg.MaxEvents = DefaultMaxEvents
	}
	if cfg.Clock == nil {
		cfg.Clock = clockwork.NewRealClock()
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	s := &Store{cfg: cfg, logger: cfg.Logger.Named("state")}
	s.cur.Store(&dbState{db: newDB(), abandon: make(chan struct{})})
	return s
}

func newDB() *memdb.MemDB {
	db, err := memdb.NewMemDB(schema())
	if err != nil {
		// The schema is a constant of this package: an error is a bug.
		panic(fmt.Sprintf("state: invalid memdb schema: %v", err))
	}
	return db
}

// Snapshot is a consistent, immutable read view of the store. Objects it
// returns are shared with the store: callers must Copy before modifying.
type Snapshot struct {
	txn     *memdb.Txn
	abandon <-chan struct{}
	// own is set on a write transaction's view only (ApplyAt): its reads
	// of a volume or an allocation by ID (own_rows.go).
	own *ownRows
	// plugins, when not nil, keeps the plugins this view has read by ID.
	// Set on the restore's view of the tables before the volumes
	// (rowChecker), which never changes and is asked for a volume's plugin
	// once per volume: a million lookups of one or a few plugins.
	plugins map[string]*structs.Plugin
}

// Snapshot returns a consistent read view of the current state.
func (s *Store) Snapshot() *Snapshot {
	st := s.cur.Load()
	return &Snapshot{txn: st.db.Txn(false), abandon: st.abandon}
}

// Generation identifies the database the view reads: Restore replaces it
// (and closes the old one's channel), so two views of one generation see
// one history of writes. Readers that fold the store's changes into their
// own totals (the stats' release window) start over on a new generation.
func (snap *Snapshot) Generation() <-chan struct{} { return snap.abandon }

// LatestIndex is the highest raft index applied to any table.
func (s *Store) LatestIndex() uint64 { return s.Snapshot().LatestIndex() }

// QueryFn reads from snap, adding the watch channels it depends on to ws, and
// returns the index its result reflects (typically a table index).
type QueryFn func(ws memdb.WatchSet, snap *Snapshot) (index uint64, err error)

// BlockingQuery runs fn; while the index fn returns is <= minIndex it waits
// for a change on ws (or ctx's end, or maxWait) and reruns fn. It returns the
// last index fn returned. minIndex 0 runs fn once. When maxWait elapses
// first the result is the unchanged one and the error nil (the caller answers
// with the same index, as the reference scheduler's blocking RPCs do); when
// ctx ends the error is ctx.Err(). maxWait <= 0 means DefaultMaxWait; it is
// capped at MaxMaxWait.
func (s *Store) BlockingQuery(ctx context.Context, minIndex uint64, maxWait time.Duration, fn QueryFn) (uint64, error) {
	return s.blockingQuery(ctx, minIndex, maxWait, minIndex == 0, fn)
}

// blockingQuery is BlockingQuery; once says to return after the first run
// whatever the index.
func (s *Store) blockingQuery(ctx context.Context, minIndex uint64, maxWait time.Duration, once bool, fn QueryFn) (uint64, error) {
	if maxWait <= 0 {
		maxWait = DefaultMaxWait
	}
	if maxWait > MaxMaxWait {
		maxWait = MaxMaxWait
	}
	waitCtx := ctx
	if !once {
		var cancel context.CancelFunc
		waitCtx, cancel = context.WithCancel(ctx)
		defer cancel()
		t := s.cfg.Clock.AfterFunc(maxWait, cancel)
		defer t.Stop()
	}
	for {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		snap := s.Snapshot()
		ws := memdb.NewWatchSet()
		ws.Add(snap.abandon)
		idx, err := fn(ws, snap)
		if err != nil {
			return idx, err
		}
		if once || idx > minIndex {
			return idx, nil
		}
		if err := ws.WatchCtx(waitCtx); err != nil {
			if cerr := ctx.Err(); cerr != nil {
				return idx, cerr
			}
			return idx, nil // maxWait elapsed
		}
	}
}

// VolumesChangedSince blocks until the volumes table index exceeds index (or
// ctx ends), then returns the volumes whose ModifyIndex > index and the
// table's new index; index 0 returns every volume as soon as the table has
// been written once (an empty, never-written table blocks, so a caller that
// feeds the returned index back never spins). A restore of the store (a
// snapshot, perhaps older) while it waits, or before it was called with an
// index the restored store has not reached, returns every volume and the
// restored index, which may be lower than index: the restored volumes'
// modify indexes say nothing about what the caller has seen (a watcher
// that waited for an index above the pre-restore one
// missed every restored claim). It implements the watcher's VolumeFeed.
func (s *Store) VolumesChangedSince(ctx context.Context, index uint64) ([]*structs.Volume, uint64, error) {
	start := s.cur.Load().abandon
	for {
		var vols []*structs.Volume
		var restoredIdx uint64
		restored := false
		idx, err := s.blockingQuery(ctx, index, MaxMaxWait, false, func(ws memdb.WatchSet, snap *Snapshot) (uint64, error) {
			tableIdx, err := snap.Index(TableVolumes)
			if err != nil {
				return 0, err
			}
			// Indexes only go back through a restore.
			restored = snap.abandon != start || tableIdx < index
			since := index
			if restored {
				since = 0
			}
			if vols, err = snap.VolumesModifiedSince(ws, since); err != nil {
				return 0, err
			}
			if restored {
				// Wake the caller whatever the restored index is, and
				// hand it the index of the very view the volumes came from.
				restoredIdx = tableIdx
				return max(tableIdx, index+1), nil
			}
			return tableIdx, nil
		})
		if err != nil {
			return nil, idx, err
		}
		if restored {
			return vols, restoredIdx, nil
		}
		if idx > index {
			return vols, idx, nil
		}
		// maxWait elapsed with nothing new: keep waiting until ctx ends.
	}
}
