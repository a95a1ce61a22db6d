package cluster

import (
	"bytes"
	"errors"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/volhost/volhost/host/acl"
	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/internal/testutil"
)

// heldTransport is an in-memory transport whose outgoing replication can be
// shaped per target: the commit index told to a follower capped (it gets
// the entries but does not learn they committed), or entry-bearing
// AppendEntries held until released (heartbeats still pass, so the
// leader keeps its lease). Pipelining is off so every entry goes through
// AppendEntries.
type heldTransport struct {
	*raft.InmemTransport
	mu      sync.Mutex
	capAt   map[raft.ServerID]uint64
	hold    map[raft.ServerID]bool
	release chan struct{}
}

func (h *heldTransport) AppendEntriesPipeline(raft.ServerID, raft.ServerAddress) (raft.AppendPipeline, error) {
	return nil, raft.ErrPipelineReplicationNotSupported
}

func (h *heldTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	h.mu.Lock()
	c, capped := h.capAt[id]
	hold, rel := h.hold[id], h.release
	h.mu.Unlock()
	if hold && len(args.Entries) > 0 {
		<-rel
	}
	if capped && args.LeaderCommitIndex > c {
		a := *args
		a.LeaderCommitIndex = c
		args = &a
	}
	return h.InmemTransport.AppendEntries(id, target, args, resp)
}

func (h *heldTransport) capCommit(id string, at uint64) {
	h.mu.Lock()
	h.capAt[raft.ServerID(id)] = at
	h.mu.Unlock()
}

func (h *heldTransport) holdEntries(ids ...string) {
	h.mu.Lock()
	for _, id := range ids {
		h.hold[raft.ServerID(id)] = true
	}
	h.mu.Unlock()
}

// open lets held requests go and holds no more; safe to call twice.
func (h *heldTransport) open() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.hold = map[raft.ServerID]bool{}
	select {
	case <-h.release:
	default:
		close(h.release)
	}
}

func (tc *tcluster) startHeld(id string, expect int) (*node, *heldTransport) {
	tc.t.Helper()
	var at *heldTransport
	n := tc.start(id, "", expect, func(cfg *Config) {
		at = &heldTransport{InmemTransport: cfg.Transport.(*raft.InmemTransport), capAt: map[raft.ServerID]uint64{},
			hold: map[raft.ServerID]bool{}, release: make(chan struct{})}
		cfg.Transport = at
	})
	tc.t.Cleanup(at.open) // before the shutdown: a held request would hold it
	return n, at
}

// TestRestoreAfterALeaderChangeKeepsATokenDeletedMeanwhile: a leader that
// lost leadership during a slow upload and won it back has not applied
// what the other leader committed meanwhile until its own first entry
// commits. The kept ACL state is read after a barrier, so a token the
// other leader deleted (its caller told success, its secret refused
// there) stays deleted. Read from the local store alone, it was read as
// present, kept, and came back on every server with the restore (a
// helper's attack on the first form of the fix).
func TestRestoreAfterALeaderChangeKeepsATokenDeletedMeanwhile(t *testing.T) {
	tc := &tcluster{t: t}
	s1, t1 := tc.startHeld("s1", 1)
	if err := s1.c.WaitForLeader(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	s2, t2 := tc.startHeld("s2", 0)
	tc.join(s2)
	s3, _ := tc.startHeld("s3", 0)
	_ = s3
	tc.join(s3)
	tc.waitConverged()
	if l := tc.leader(); l != s1 {
		t.Fatalf("leader is %s, want s1", l.id)
	}
	testutil.WaitFor(t, "features enabled", func() bool { return len(s1.c.EnabledFeatures()) > 0 })
	loadBase(t, s1.c)
	svc1 := acl.NewService(s1.s, s1.c, nil)
	boot, _, err := svc1.Bootstrap(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc1.UpsertPolicy(testCtx(t), boot.AccessorID, &structs.ACLPolicy{Name: "ops", Rules: `operator { policy = "write" }`}); err != nil {
		t.Fatal(err)
	}
	leaked, leakedSecret, err := svc1.CreateToken(testCtx(t), boot.AccessorID, acl.NewToken{Name: "leaked", Policies: []string{"ops"}})
	if err != nil {
		t.Fatal(err)
	}
	var saved bytes.Buffer
	if err := s1.c.SaveSnapshot(testCtx(t), &saved); err != nil {
		t.Fatal(err)
	}
	tc.waitConverged()
	raw := saved.Bytes()
	nl := bytes.IndexByte(raw, '\n')

	// The operator's upload starts on the leader, s1.
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- s1.c.RestoreSnapshot(testCtx(t), pr, RestoreOptions{}) }()
	if _, err := pw.Write(raw[:nl+1]); err != nil {
		t.Fatal(err)
	}

	// While it uploads, leadership moves to s2.
	if err := s1.c.TransferLeadership(testCtx(t), "s2"); err != nil {
		t.Fatal(err)
	}
	if err := s2.c.WaitForLeader(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if err := s2.c.Barrier(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	// s1 gets every entry from here on but is not told they commit (a
	// slow link: the commit index reaches it a round later).
	t2.capCommit("s1", s2.c.AppliedIndex())

	// An administrator revokes the leaked token on s2: success, and the
	// secret is refused there.
	svc2 := acl.NewService(s2.s, s2.c, nil)
	if _, err := svc2.DeleteToken(testCtx(t), boot.AccessorID, leaked.AccessorID); err != nil {
		t.Fatal(err)
	}
	if _, err := svc2.Resolve(leakedSecret); !errors.Is(err, acl.ErrTokenNotFound) {
		t.Fatalf("right after the deletion the secret resolves on s2: %v", err)
	}

	// Leadership comes back to s1 (it holds the whole log, so it may
	// lead); its first entry has not committed yet.
	t1.holdEntries("s2", "s3")
	if err := s2.c.TransferLeadership(testCtx(t), "s1"); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "s1 leads again", func() bool { return s1.c.IsLeader() })
	if tok, _ := s1.s.ACLTokenByAccessor(leaked.AccessorID); tok == nil {
		t.Fatal("s1 applied the deletion already: the interleaving did not arise")
	}

	// The upload ends; once the restore has read it whole it holds ACL
	// writes off and reads the ACL state it keeps (after a barrier, which
	// needs the others: s1's entries reach them from here on).
	go func() {
		_, err := pw.Write(raw[nl+1:])
		pw.CloseWithError(err)
	}()
	testutil.WaitFor(t, "the restore to hold ACL writes off", func() bool {
		if s1.c.aclWrites.TryRLock() {
			s1.c.aclWrites.RUnlock()
			return false
		}
		return true
	})
	t1.open()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("restore: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("restore never finished")
	}
	tc.waitConverged()

	for _, n := range tc.nodes {
		svc := acl.NewService(n.s, n.c, nil)
		if id, err := svc.Resolve(leakedSecret); err == nil {
			t.Errorf("%s: the secret deleted (and refused) on s2 before the restore resolves again after it (accessor %s, operator:write=%v)",
				n.id, id.Accessor(), id.ACL.Allowed(acl.OperatorWrite, ""))
		}
	}
}
