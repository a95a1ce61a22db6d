package keylock

import (
	"context"
	"testing"
	"time"
)

// A key's lock excludes its other callers and no other key's; a wait ends
// with its context, and an unused key leaves nothing behind.
func TestSetLocksPerKey(t *testing.T) {
	var s Set[string]
	ctx := context.Background()
	unlockA, err := s.Lock(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	unlockB, err := s.Lock(ctx, "b") // another key: not blocked
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	if _, err := s.Lock(short, "a"); err == nil {
		t.Fatal("a second caller took a held key's lock")
	}
	if got := s.Holders("a"); got != 1 {
		t.Fatalf("holders of a after a wait gave up: %d, want 1", got)
	}
	got := make(chan func())
	go func() {
		u, _ := s.Lock(ctx, "a")
		got <- u
	}()
	unlockA()
	(<-got)()
	unlockB()
	if s.Busy("a") || s.Busy("b") || len(s.locks) != 0 {
		t.Fatalf("locks left after every unlock: %v", s.locks)
	}
}
