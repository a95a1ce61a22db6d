package cluster

import (
	"errors"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// A leader replicating to a follower that is down fails each append at the
// dial (connection refused) and raft backs off before the next: 10 ms
// doubling per failure up to 10.24 s (hashicorp/raft replication.go,
// failureWait and maxFailureScale, unexported), and only a successful
// append resets it, so a restarted follower waited out whatever backoff
// the failures of its downtime had built: 7.4 s of a 10.9 s catch-up at
// 100,000 volumes. Nothing public wakes a replication goroutine from that
// wait, and re-adding the voter does not restart it.
//
// reachTransport therefore does not report an unreachable follower at
// once: an append whose dial fails is tried again every reachRetryEvery
// until the follower accepts the connection, for up to reachWaitMax, and
// only then does raft see the failure. A follower that comes back is sent
// its entries within reachRetryEvery, and raft's failure count grows by
// one per reachWaitMax of downtime instead of one per backoff (after a
// minute down it waits 20 ms, not 10 s). Only the dial is retried: the
// request was never sent, so sending it again cannot apply it twice (and
// an append is idempotent in raft anyway); an error after the connection
// (a timeout, a reset) reaches raft as it was. Heartbeats to the follower
// wait the same way, on their own goroutine.
//
// The wait holds raft's replication goroutine for that follower only; the
// cluster ends it before raft shuts down (stopWaiting), so a shutdown with
// a follower down is not held up.
const (
	reachRetryEvery = 50 * time.Millisecond
	reachWaitMax    = 30 * time.Second
)

// reachTransport is raft's network transport with appends to an
// unreachable peer held and retried (see above). Every other method is
// the NetworkTransport's, its optional interfaces (pre-vote, close)
// included.
type reachTransport struct {
	*raft.NetworkTransport
	every, max time.Duration
	quit       chan struct{}
	quitOnce   sync.Once
}

func newReachTransport(t *raft.NetworkTransport) *reachTransport {
	return &reachTransport{NetworkTransport: t, every: reachRetryEvery, max: reachWaitMax, quit: make(chan struct{})}
}

// AppendEntries implements raft.Transport.
func (t *reachTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	err := t.NetworkTransport.AppendEntries(id, target, args, resp)
	if !dialFailed(err) {
		return err
	}
	deadline := time.NewTimer(t.max)
	defer deadline.Stop()
	tick := time.NewTicker(t.every)
	defer tick.Stop()
	for {
		select {
		case <-t.quit:
			return err
		case <-deadline.C:
			return err
		case <-tick.C:
		}
		if t.IsShutdown() {
			return err
		}
		if err = t.NetworkTransport.AppendEntries(id, target, args, resp); !dialFailed(err) {
			return err
		}
	}
}

// stopWaiting ends every held append now and holds none after (before
// raft shuts down: it waits for its replication goroutines).
func (t *reachTransport) stopWaiting() { t.quitOnce.Do(func() { close(t.quit) }) }

// dialFailed reports whether err is a failure to connect: the request was
// not sent.
func dialFailed(err error) bool {
	var op *net.OpError
	return err != nil && errors.As(err, &op) && op.Op == "dial"
}
