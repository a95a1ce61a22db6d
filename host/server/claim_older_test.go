package server

import (
	"sync"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/volhost/volhost/host/cluster"
	"github.com/volhost/volhost/host/csi/csitest"
	"github.com/volhost/volhost/host/structs"
)

// olderCluster is a cluster one of whose servers does not know the
// publishing state yet (a rolling upgrade): the claim-publishing gate is
// closed.
type olderCluster struct{ *cluster.Cluster }

func (olderCluster) ClaimsWriteAhead() bool { return false }

// While a server of the cluster does not know the publishing state, the
// claim path publishes first and commits the claim taken after, as the
// releases before the write-ahead record did: no publishing record is ever
// written (an older server would refuse it and lack the claim), a refused
// publish is rolled back with nothing recorded, and the claim is released
// as any taken one, without a CSI spec violation.
func TestClaimPublishFirstWhileGated(t *testing.T) {
	h := newHarness(t, "node1")
	h.restartServer(olderCluster{h.cluster})
	ref := h.volume("default", "vol1", structs.AccessSingleNodeWriter)
	var mu sync.Mutex
	var seen []string // the claim's recorded state at each CSI call
	h.setOnCall(func(_ string, c csitest.Call) {
		st := "none"
		if cl := h.vol(ref).Claims["web-1"]; cl != nil {
			st = string(cl.State)
		}
		mu.Lock()
		seen = append(seen, c.Method+":"+st)
		mu.Unlock()
	})

	// Refused at NodePublish: rolled back, nothing recorded.
	h.nodes["node1"].Script(csitest.NodePublish, csitest.Result{Code: codes.Internal})
	h.mustAlloc("default", "web-1", "node1", structs.AllocRunning)
	if err := h.claim(ref, "web-1", "node1", structs.ClaimWrite); err == nil {
		t.Fatal("a claim whose NodePublish failed was accepted")
	}
	if c := h.vol(ref).Claims["web-1"]; c != nil {
		t.Fatalf("a refused publish-first claim left a record: %+v", c)
	}
	if n := len(h.calls("controller", csitest.ControllerUnpublish, ref)); n != 1 {
		t.Fatalf("the rollback sent ControllerUnpublish %d times, want 1", n)
	}
	noViolations(t, h)

	if err := h.claim(ref, "web-1", "node1", structs.ClaimWrite); err != nil {
		t.Fatal(err)
	}
	if c := h.vol(ref).Claims["web-1"]; c == nil || c.State != structs.ClaimTaken {
		t.Fatalf("claim %+v, want taken", c)
	}
	mu.Lock()
	for _, s := range seen {
		if s[len(s)-len(":none"):] != ":none" && !isRelease(s) {
			t.Errorf("a claim-path CSI call saw a recorded claim (%s): the claim was written before its publish", s)
		}
	}
	mu.Unlock()
	inUse(t, h, ref, "web-1", machineOf("node1"))
	h.mustAlloc("default", "web-1", "node1", structs.AllocComplete)
	h.releaseAll(ref)
	noViolations(t, h)
	if n := len(h.calls("controller", csitest.ControllerUnpublish, ref)); n != 2 {
		t.Fatalf("ControllerUnpublish sent %d times (rollback + release), want 2", n)
	}
}

// isRelease: a call seen while the claim is released (after it was taken).
func isRelease(s string) bool {
	for _, m := range []string{csitest.NodeUnpublish, csitest.NodeUnstage, csitest.ControllerUnpublish} {
		if len(s) > len(m) && s[:len(m)+1] == m+":" {
			return true
		}
	}
	return false
}
