package cluster

import (
	"context"
	"errors"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/volhost/volhost/host/csi"
	"github.com/volhost/volhost/host/csi/csitest"
	"github.com/volhost/volhost/host/server"
	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/internal/testutil"
	"github.com/volhost/volhost/watcher"
	"github.com/volhost/volhost/watcher/attach"
)

// fence2Log is the claim path's log, the cluster itself, telling the test
// when a claim took its term (ReadyTerm), once armed.
type fence2Log struct {
	*Cluster
	armed atomic.Bool
	once  sync.Once
	asked chan struct{}
}

func (l *fence2Log) ReadyTerm() uint64 {
	t := l.Cluster.ReadyTerm()
	if l.armed.Load() {
		l.once.Do(func() { close(l.asked) })
	}
	return t
}

// fence2Modules serves every volume with the native CSI-spec adapter.
type fence2Modules struct{}

func (fence2Modules) AdapterFor(*structs.Volume) attach.Adapter { return watcher.SpecAdapter{} }

// Invariant 1 (safety), the claim path outside host/csi's fenced calls.
// Every CSI call of leader work is meant to go out under a confirmation of
// its term (attach.Call) and the fence's second look. The claim path's
// checkMachine (host/server/claim.go) calls csi.Client.ProbeNode (Probe,
// NodeGetInfo, NodeGetCapabilities, GetPluginCapabilities) with the
// request's context, outside attach.Call: no ConfirmLeader, and no fence in
// the context for invoke to check. Found: a claim that took its term, then
// waited (here on the volume's lock) while this server handed leadership
// over, sends the node plugin four calls from a server that no longer
// leads (StillConfirmed fails for the claim's term when each arrives).
// They are read-only, but the invariant "no CSI call leaves a server whose
// confirmation for the call's term does not hold" is broken, and a driver
// log that names the sender (csi.Config.Caller) shows a deposed server
// calling it. Now checkMachine's probe runs under p.call (attach.Call
// with the claim's term).
func TestClaimPathProbesAreFenced(t *testing.T) {
	tc := newCluster(t, 3)
	l := tc.leader()
	ctx := testCtx(t)

	var mu sync.Mutex
	var stale []string // calls that arrived while the claim's term was no longer confirmed
	var claimTerm atomic.Uint64
	watching := atomic.Bool{}
	hook := func(c csitest.Call) {
		if !watching.Load() {
			return
		}
		if err := l.c.StillConfirmed(claimTerm.Load()); err != nil {
			mu.Lock()
			stale = append(stale, c.Method)
			mu.Unlock()
		}
	}
	ctl := csitest.NewServer(t, csitest.Options{PublishUnpublish: true, OnCall: hook})
	np := csitest.NewServer(t, csitest.Options{NodeID: "ext-n1", StageUnstage: true, OnCall: hook})
	client := csi.New(csi.Config{CallTimeout: 10 * time.Second})
	t.Cleanup(func() { _ = client.Close() })
	log := &fence2Log{Cluster: l.c, asked: make(chan struct{})}
	locks := attach.NewVolumeLocks()
	srv := server.New(server.Config{Store: l.s, Log: log, CSI: client, Modules: fence2Modules{}, Locks: locks, Logger: logger(t)})

	if _, err := srv.RegisterPlugin(ctx, &structs.Plugin{ID: "csitest", ControllerEndpoint: ctl.Endpoint()}); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.RegisterNode(ctx, &structs.Node{ID: "n1", RootDir: "/var/lib/volhost-test",
		Plugins: map[string]*structs.NodePlugin{"csitest": {Endpoint: np.Endpoint()}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.RegisterVolumes(ctx, []*structs.Volume{{Namespace: "default", ID: "vol1", ExternalID: "disk-1", PluginID: "csitest",
		AccessMode: structs.AccessSingleNodeWriter, AttachmentMode: structs.AttachFilesystem}}); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.UpsertAllocs(ctx, []*structs.Alloc{{ID: "a1", Namespace: "default", NodeID: "n1", ClientStatus: structs.AllocRunning}}); err != nil {
		t.Fatal(err)
	}

	// The claim takes its term, then waits for the volume's lock.
	unlock, err := locks.Lock(ctx, structs.VolumeRef{Namespace: "default", ID: "vol1"})
	if err != nil {
		t.Fatal(err)
	}
	claimTerm.Store(l.c.ReadyTerm())
	log.armed.Store(true)
	claimed := make(chan error, 1)
	go func() {
		_, err := srv.ClaimVolume(ctx, &structs.ClaimRequest{Namespace: "default", VolumeID: "vol1", AllocID: "a1", NodeID: "n1", Mode: structs.ClaimWrite})
		claimed <- err
	}()
	select {
	case <-log.asked:
	case <-ctx.Done():
		t.Fatal("the claim never asked for its term")
	}
	// Meanwhile this server hands leadership over.
	if err := l.c.TransferLeadership(ctx, tc.followers(l)[0].id); err != nil {
		t.Fatal(err)
	}
	watching.Store(true)
	unlock()
	var cerr error
	select {
	case cerr = <-claimed:
	case <-ctx.Done():
		t.Fatal("the claim never returned")
	}
	if cerr == nil {
		t.Fatal("a claim on a server that handed leadership over succeeded")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(stale) != 0 {
		sort.Strings(stale)
		t.Errorf("the claim path of a server that no longer leads in the claim's term sent %v to the plugins (claim: %v): "+
			"checkMachine's ProbeNode runs outside attach.Call, unconfirmed and unfenced", stale, cerr)
	}
}

// Pin (invariant 1): a graceful transfer ends the fence at once for calls
// already confirmed: StillConfirmed of the old term fails from the
// transfer on, although the last verification is younger than the lease.
func TestStillConfirmedEndsWithATransfer(t *testing.T) {
	tc := newCluster(t, 3)
	l := tc.leader()
	term := l.c.ReadyTerm()
	if err := l.c.ConfirmLeader(testCtx(t), term); err != nil {
		t.Fatal(err)
	}
	var inHook error
	l.c.OnTransfer(func() { inHook = l.c.StillConfirmed(term) })
	if err := l.c.TransferLeadership(testCtx(t), tc.followers(l)[0].id); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(inHook, structs.ErrNoLeader) {
		t.Fatalf("StillConfirmed during the transfer hook: %v, want ErrNoLeader", inHook)
	}
	if err := l.c.StillConfirmed(term); !errors.Is(err, structs.ErrNoLeader) {
		t.Fatalf("StillConfirmed after the transfer: %v, want ErrNoLeader", err)
	}
}

// Pin (invariant 1): a leader cut off from its quorum has its fence
// closed by the time another server leads: the others elect only after
// their heartbeat timeout, which raft keeps at least the lease.
func TestStillConfirmedClosedBeforeANewLeaderLeads(t *testing.T) {
	tc := newCluster(t, 3)
	old := tc.leader()
	term := old.c.ReadyTerm()
	if err := old.c.ConfirmLeader(testCtx(t), term); err != nil {
		t.Fatal(err)
	}
	tc.partition(old)
	others := tc.followers(old)
	// At every poll: once another server leads, the old fence is closed.
	testutil.WaitFor(t, "a new leader", func() bool {
		for _, n := range others {
			if n.c.raft.State() == raft.Leader {
				if err := old.c.StillConfirmed(term); err == nil {
					t.Fatalf("%s leads while the cut-off %s's fence for term %d still holds", n.id, old.id, term)
				}
				return true
			}
		}
		return false
	})
	if err := old.c.StillConfirmed(term); !errors.Is(err, structs.ErrNoLeader) {
		t.Fatalf("cut-off leader's fence: %v, want ErrNoLeader", err)
	}
}

// Pin (invariant 2): a verification shared by a burst of calls (the
// ConfirmLeader fast path) leaves each of them at least half a lease for
// the fence: no healthy leader's call is refused for sharing. Run with a
// lease long enough that the scheduler of a loaded -race run cannot eat
// the half.
func TestSharedVerificationLetsEveryCallThrough(t *testing.T) {
	tc := &tcluster{t: t}
	n := tc.start("s1", "", 1, func(c *Config) {
		c.LeaderLeaseTimeout, c.HeartbeatTimeout, c.ElectionTimeout = time.Second, time.Second, time.Second
	})
	if err := n.c.WaitForLeader(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	term := n.c.ReadyTerm()
	ctx := testCtx(t)
	if err := n.c.ConfirmLeader(ctx, term); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 200)
	for range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- attach.Call(ctx, n.c, term, 0, func(ctx context.Context) error { return attach.Fence(ctx) })
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("a healthy leader's call was refused: %v", err)
		}
	}
	// And the oldest a shared verification may be when ConfirmLeader lets
	// a call through still leaves the fence half a lease.
	n.c.mu.Lock()
	n.c.verifiedAt = time.Now().Add(-n.c.confirmMaxAge() + 200*time.Millisecond)
	n.c.mu.Unlock()
	if err := n.c.ConfirmLeader(ctx, term); err != nil {
		t.Fatal(err)
	}
	n.c.mu.Lock()
	at := n.c.verifiedAt
	// Half way between the oldest shared verification a call may be let
	// through on (confirmMaxAge) and the lease.
	n.c.verifyClock = func() time.Time { return at.Add(n.c.confirmMaxAge() + (n.c.lease-n.c.confirmMaxAge())/2) }
	n.c.mu.Unlock()
	if err := n.c.StillConfirmed(term); err != nil {
		t.Fatalf("fence of a call let through on the oldest shared verification, a quarter lease later: %v", err)
	}
}
