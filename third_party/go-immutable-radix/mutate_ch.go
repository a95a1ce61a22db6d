package iradix

import "sync/atomic"

// volhost's first change to go-immutable-radix v1.3.1: a node's
// and a leaf's mutation channel is made when something first watches it,
// not when the node is made. Upstream makes two channels per key (its
// leaf's and its node's, 96 bytes each) plus one per inner node and per
// copy a write makes, and nearly none is ever watched: in volhost's state
// store at 200,000 volumes they were a third of the live heap
// (BenchmarkScaleHeap, host/cluster). The semantics are upstream's: a
// watch taken on a node before a transaction that replaces it commits is
// closed by that commit's Notify, and one taken after is closed already.
//
// A mutateCh is nil until watched or notified. watch installs a fresh
// channel with a compare-and-swap (readers of one immutable tree race for
// it; the loser takes the winner's). close swaps in closedCh, a channel
// closed once at start, and closes what it replaced, if a watcher made
// one: a node notified before anyone watched it answers later watches
// with a closed channel, as upstream's closed channel would, and closing
// twice (a node tracked twice, or by both notify paths) does nothing.
type mutateCh struct{ p atomic.Pointer[chan struct{}] }

var closedCh = func() *chan struct{} {
	c := make(chan struct{})
	close(c)
	return &c
}()

// watch returns the channel closed when the node is replaced, making it if
// nothing has yet.
func (m *mutateCh) watch() chan struct{} {
	for {
		if p := m.p.Load(); p != nil {
			return *p
		}
		c := make(chan struct{})
		if m.p.CompareAndSwap(nil, &c) {
			return c
		}
	}
}

// watched says whether anything has watched the node (or it was
// notified): a watcher made its channel.
func (m *mutateCh) watched() bool { return m.p.Load() != nil }

// close marks the node replaced and wakes whoever watches it.
func (m *mutateCh) close() {
	if p := m.p.Swap(closedCh); p != nil && p != closedCh {
		close(*p)
	}
}
