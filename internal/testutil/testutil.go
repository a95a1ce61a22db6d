// Package testutil holds what the tests of every package share: the one
// wait-for-condition helper (tests never sleep to synchronise: they poll a
// condition until it holds or a deadline passes), a log sink a test can
// read while other goroutines write it, and the benchmarks' rounds,
// spreads, fan-out and RSS reading (rounds.go).
package testutil

import (
	"bytes"
	"context"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"
)

// Deadline is how long WaitFor waits before it fails the test: generous,
// because it only matters when a test fails, and a -race run on a loaded
// 2-core machine is slow.
const Deadline = 90 * time.Second

// pollEvery is how often the condition is re-checked.
const pollEvery = 2 * time.Millisecond

// WaitFor polls cond until it holds, failing t after Deadline with what
// it was waiting for.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	WaitForCtx(t, context.Background(), what, cond)
}

// WaitForCtx is WaitFor that also gives up when ctx ends.
func WaitForCtx(t testing.TB, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(Deadline)
	defer deadline.Stop()
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s: %v", what, ctx.Err())
			return
		case <-deadline.C:
			t.Fatalf("timed out waiting for %s after %s", what, Deadline)
			return
		case <-tick.C:
		}
	}
}

// SyncBuffer is a bytes.Buffer safe to write from several goroutines (a
// logger, a command's output) while the test reads it.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns everything written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// EnvInt reads an integer of at least least from the environment variable
// name, def when it is unset; anything else fails the test or benchmark
// naming the variable (the benchmarks' sizes and knobs).
func EnvInt(tb testing.TB, name string, def, least int) int {
	tb.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < least {
		tb.Fatalf("%s=%q: want an integer of at least %d", name, v, least)
	}
	return n
}
