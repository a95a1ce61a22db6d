package api

import (
	"context"
	"net/http"
	"time"

	memdb "github.com/hashicorp/go-memdb"

	"github.com/volhost/volhost/host/state"
)

// NewServer returns a Server over the real state store: New with
// StateStore(store).
func NewServer(cfg Config, store *state.Store, backend Backend, metrics http.Handler) *Server {
	return New(cfg, StateStore(store), backend, metrics)
}

// StateStore adapts *state.Store to Store: its snapshots are the Reader.
func StateStore(s *state.Store) Store { return stateStore{s} }

type stateStore struct{ s *state.Store }

func (s stateStore) Query(ctx context.Context, minIndex uint64, maxWait time.Duration, fn QueryFn) (uint64, error) {
	return s.s.BlockingQuery(ctx, minIndex, maxWait, func(ws memdb.WatchSet, snap *state.Snapshot) (uint64, error) {
		return fn(ws, snap)
	})
}

// Table names as host/state names them: the per-table index blocking
// queries wait on.
const (
	tableVolumes   = state.TableVolumes
	tableAllocs    = state.TableAllocs
	tableNodes     = state.TableNodes
	tablePlugins   = state.TablePlugins
	tableEvents    = state.TableEvents
	tableLeftovers = state.TableLeftovers
)
