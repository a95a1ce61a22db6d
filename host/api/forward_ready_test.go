package api_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/volhost/volhost/host/api"
	"github.com/volhost/volhost/host/api/apitest"
	"github.com/volhost/volhost/internal/testutil"
)

// stepUpOp is a leader whose step-up barrier is applied once ready is set.
type stepUpOp struct {
	*fakeOp
	ready   atomic.Bool
	deposed atomic.Bool  // leadership lost
	reads   atomic.Int32 // ReadyForReads calls
}

func (o *stepUpOp) IsLeader() bool { return !o.deposed.Load() }

func (o *stepUpOp) ReadyForReads() bool {
	o.reads.Add(1)
	return o.ready.Load()
}

// A default read on a leader that has not applied its committed log yet
// (just elected, or just restarted) waits for its step-up barrier instead
// of answering from a store that may lack acknowledged writes; a stale
// read does not wait; a leader that loses its leadership while waiting
// answers 503.
func TestLeaderReadWaitsForItsLog(t *testing.T) {
	op := &stepUpOp{fakeOp: &fakeOp{id: "s1", leader: true}}
	b := apitest.NewStoreBackend()
	s := api.NewServer(api.Config{}, b.Store, b, nil)
	s.EnableCluster(op)
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)

	if resp, _ := do(t, "GET", ts.URL+"/v1/nodes?stale=true", ""); resp.StatusCode != http.StatusOK {
		t.Fatalf("stale read: %d", resp.StatusCode)
	}
	done := make(chan int, 1)
	go func() {
		resp, _ := do(t, "GET", ts.URL+"/v1/nodes", "")
		done <- resp.StatusCode
	}()
	testutil.WaitFor(t, "the read to ask again whether the leader applied its log", func() bool { return op.reads.Load() >= 2 })
	select {
	case code := <-done:
		t.Fatalf("a read answered %d before the leader applied its log", code)
	default:
	}
	op.ready.Store(true)
	if code := <-done; code != http.StatusOK {
		t.Fatalf("read once the log is applied: %d", code)
	}

	lost := &stepUpOp{fakeOp: &fakeOp{id: "s2", leader: true}}
	s2 := api.NewServer(api.Config{}, b.Store, b, nil)
	s2.EnableCluster(lost)
	ts2 := httptest.NewServer(s2.Handler())
	t.Cleanup(ts2.Close)
	got := getInBackground(ts2.URL+"/v1/nodes", "")
	testutil.WaitFor(t, "the read to wait on the deposed leader", func() bool { return lost.reads.Load() >= 2 })
	lost.deposed.Store(true)
	a := <-got
	code, body := a.code, a.body
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "lost its leadership") {
		t.Fatalf("read on a leader deposed while applying its log: %d %s", code, body)
	}
}
