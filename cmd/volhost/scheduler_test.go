package main

import (
	"encoding/json"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/volhost/volhost/host/api"
	"github.com/volhost/volhost/host/api/apitest"
	"github.com/volhost/volhost/host/scheduler"
)

type fakeSchedulers []scheduler.Status

func (f fakeSchedulers) SchedulerStatus() []scheduler.Status { return f }

// TestSchedulerStatus: `volhost scheduler status` shows the connection
// state, the committed index, the counts, the last error and one line per
// problem; -json is the API's answer.
func TestSchedulerStatus(t *testing.T) {
	b := apitest.NewStoreBackend()
	srv := api.NewServer(api.Config{Audit: b}, b.Store, b, nil)
	srv.EnableSchedulers(fakeSchedulers{{Source: "nomad", Address: "http://127.0.0.1:4646", State: scheduler.StateRetrying,
		Index: 42, Resets: 1, Nodes: 2, Allocs: 3, Live: 2, Terminal: 1, Held: 1, Claims: 2,
		LastError: "listing Nomad nodes: Nomad refused the token (HTTP 403 Permission denied)",
		Problems: []scheduler.Problem{{Key: "alloc/a1/volume/default/nope", Message: "claim of volume default/nope refused: volume default/nope is not registered in volhost",
			Since: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)}}}})
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	e := &cliEnv{t: t, backend: b, addr: ts.URL}
	out := e.ok("scheduler", "status")
	contains(t, "scheduler status", out, "nomad", "retrying", "Index        = 42", "3 (2 live, 1 terminal, 1 held)",
		"Nomad refused the token", "2026-12-01T10:00:00Z  claim of volume default/nope refused")
	var got []scheduler.Status
	if err := json.Unmarshal([]byte(e.ok("scheduler", "status", "-json")), &got); err != nil || len(got) != 1 || got[0].Index != 42 {
		t.Fatalf("-json: %v %+v", err, got)
	}
	// No scheduler block: one line saying how to add one.
	none := api.NewServer(api.Config{Audit: b}, b.Store, b, nil)
	none.EnableSchedulers(fakeSchedulers(nil))
	ts2 := httptest.NewServer(none.Handler())
	t.Cleanup(ts2.Close)
	e2 := &cliEnv{t: t, addr: ts2.URL}
	contains(t, "scheduler status without a source", e2.ok("scheduler", "status"), `add a scheduler "nomad"`)
	if out := e2.ok("scheduler", "status", "-json"); out != "[]\n" && out != "[]" {
		t.Errorf("-json without a source = %q, want []", out)
	}
}
