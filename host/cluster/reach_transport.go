package cluster

import (
	"errors"
	"io"
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
// A snapshot sent to a follower that is down (one back after the log was
// compacted past it) waits the same way: only the dial is retried, before
// a byte of the snapshot was read, so a follower that returns is sent it
// within reachRetryEvery instead of after raft's backoff.
//
// The wait holds raft's replication goroutine for that follower only; the
// cluster ends it before raft shuts down (stopWaiting), so a shutdown with
// a follower down is not held up.
//
// The transport also remembers which peers its last dial could not reach
// (unreachable): the leader takes no fresh snapshot for a follower while
// one is down (snapshot_fresh.go).
const (
	reachRetryEvery = 50 * time.Millisecond
	reachWaitMax    = 30 * time.Second
	// reachForget is how long a failed dial counts a peer unreachable
	// with no attempt since: a peer still in the configuration is dialled
	// at every heartbeat and every held retry, one removed from it never
	// again.
	reachForget = 2 * reachWaitMax
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

	mu sync.Mutex
	// down holds the peers whose last dial failed, with its time.
	down map[raft.ServerAddress]time.Time
	// stale says whether a snapshot at this index lags the applied state
	// enough that a fresh one is worth taking (snapshot_fresh.go); nil:
	// never.
	stale func(index uint64) bool
}

func newReachTransport(t *raft.NetworkTransport) *reachTransport {
	return &reachTransport{NetworkTransport: t, every: reachRetryEvery, max: reachWaitMax, quit: make(chan struct{}),
		down: map[raft.ServerAddress]time.Time{}}
}

// AppendEntries implements raft.Transport.
func (t *reachTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	return t.held(target, func() error { return t.NetworkTransport.AppendEntries(id, target, args, resp) })
}

// InstallSnapshot implements raft.Transport. NetworkTransport dials before
// it reads data, so a retry after a failed dial sends the whole snapshot.
//
// raft picked this snapshot while the follower was down, and so, by the
// rule that no fresh one is taken for an unreachable peer, as it was: a
// follower that returns is not sent it when it has fallen a gap of
// entries behind meanwhile (stale). The send then fails without sending
// once a connection to the peer succeeds, raft asks again soon (its
// failure count grew by one per reachWaitMax held), and, the peer
// reachable now, gets a fresh one.
func (t *reachTransport) InstallSnapshot(id raft.ServerID, target raft.ServerAddress, args *raft.InstallSnapshotRequest,
	resp *raft.InstallSnapshotResponse, data io.Reader) error {
	waited := false
	return t.held(target, func() error {
		if waited && t.stale != nil && t.stale(args.LastLogIndex) {
			if conn, err := net.DialTimeout("tcp", string(target), t.every); err == nil {
				_ = conn.Close()
				return errSnapshotStale // not a dial failure: held returns it, the peer noted reachable
			}
		}
		waited = true
		return t.NetworkTransport.InstallSnapshot(id, target, args, resp, data)
	})
}

// errSnapshotStale ends a held snapshot send to a follower that is back
// (InstallSnapshot).
var errSnapshotStale = errors.New("the follower is back and the snapshot picked while it was away is stale: picking again")

// held runs send, and again every t.every while its dial fails, for up to
// t.max; it records target's reachability from each attempt.
func (t *reachTransport) held(target raft.ServerAddress, send func() error) error {
	err := t.note(target, send())
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
		if err = t.note(target, send()); !dialFailed(err) {
			return err
		}
	}
}

// note records whether err says target could not be dialled, and returns
// err.
func (t *reachTransport) note(target raft.ServerAddress, err error) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if dialFailed(err) {
		t.down[target] = time.Now()
	} else {
		delete(t.down, target)
	}
	return err
}

// unreachable reports whether a peer's last dial, within reachForget,
// failed.
func (t *reachTransport) unreachable() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for addr, at := range t.down {
		if time.Since(at) < reachForget {
			return true
		}
		delete(t.down, addr)
	}
	return false
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
