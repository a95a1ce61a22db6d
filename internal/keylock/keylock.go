// Package keylock owns a mutex per key: callers that must not interleave
// on one key (a volume, a node) wait for each other, and callers on other
// keys do not. Entries are dropped when no one holds or waits on them, so
// the set does not grow with the number of keys ever locked.
package keylock

import (
	"context"
	"sync"
)

// Set is a lock per key. The zero value is ready to use.
type Set[K comparable] struct {
	mu    sync.Mutex
	locks map[K]*entry
}

type entry struct {
	ch   chan struct{} // holds one token while locked
	refs int
}

// Lock takes k's lock, waiting at most until ctx ends, and returns the
// unlock function.
func (s *Set[K]) Lock(ctx context.Context, k K) (func(), error) {
	s.mu.Lock()
	if s.locks == nil {
		s.locks = make(map[K]*entry)
	}
	e := s.locks[k]
	if e == nil {
		e = &entry{ch: make(chan struct{}, 1)}
		s.locks[k] = e
	}
	e.refs++
	s.mu.Unlock()
	select {
	case e.ch <- struct{}{}:
		return func() { <-e.ch; s.drop(k, e) }, nil
	case <-ctx.Done():
		s.drop(k, e)
		return nil, ctx.Err()
	}
}

func (s *Set[K]) drop(k K, e *entry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e.refs--
	if e.refs == 0 {
		delete(s.locks, k)
	}
}

// Busy reports whether k's lock is held or waited for.
func (s *Set[K]) Busy(k K) bool { return s.Holders(k) > 0 }

// Holders is how many callers hold or wait for k's lock.
func (s *Set[K]) Holders(k K) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.locks[k]; e != nil {
		return e.refs
	}
	return 0
}
