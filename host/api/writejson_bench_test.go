package api

import (
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/volhost/volhost/host/structs"
)

// BenchmarkWriteJSONEvents answers a page of 1,000 claim events, as
// GET /v1/events?per_page=1000 does (the web UI's events page): the
// route's CPU is its JSON. scripts/bench-json-ab.sh runs it before and
// after a change.
func BenchmarkWriteJSONEvents(b *testing.B) {
	page := make([]*structs.Event, 1000)
	t0 := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	for i := range page {
		page[i] = &structs.Event{Index: uint64(100_000 + i), Time: t0.Add(time.Duration(i) * time.Millisecond),
			Type: structs.EventClaimTransition, Namespace: "default", VolumeID: fmt.Sprintf("vol-%07d", i),
			AllocID: fmt.Sprintf("%08x-0000-4000-8000-%012x", i, i), NodeID: fmt.Sprintf("node-%04d", i%200),
			PluginID: "ebs.csi.aws.com", Message: "claim taken (single-node-writer)",
			Fields: map[string]string{"state": "taken", "attempts": "0"}}
	}
	b.ReportAllocs()
	for b.Loop() {
		rec := httptest.NewRecorder()
		WriteJSON(rec, 200, page)
		b.SetBytes(int64(rec.Body.Len()))
	}
}
