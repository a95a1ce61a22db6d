package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/volhost/volhost/test/peers/internal/fault"
)

// The judges the chaos, upgrade and partition runs share: what the
// driver's own log and state, the store's events and the servers' digests
// say at the end of a run.

// claimRemovals counts, per volume/alloc, the store events that removed a
// claim ("-> ready-to-free"), read through any live server.
func claimRemovals(ctx context.Context, cl *Cluster) (map[string]int, error) {
	type event struct {
		Type     string `json:"type"`
		VolumeID string `json:"volume_id"`
		AllocID  string `json:"alloc_id"`
		Message  string `json:"message"`
	}
	var evs []event
	err := cl.Retry(ctx, func(ctx context.Context, a *API) error {
		evs = evs[:0]
		for next := ""; ; {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.base+"/v1/events?per_page=1000&next_token="+url.QueryEscape(next), nil)
			if err != nil {
				return err
			}
			resp, err := a.hc.Do(req)
			if err != nil {
				return err
			}
			var page []event
			err = json.NewDecoder(resp.Body).Decode(&page)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return &HTTPError{Status: resp.StatusCode, Body: resp.Status}
			}
			if err != nil {
				return err
			}
			evs = append(evs, page...)
			if next = resp.Header.Get("X-Volhost-NextToken"); next == "" {
				return nil
			}
		}
	})
	removed := map[string]int{}
	for _, e := range evs {
		if strings.Contains(e.Message, "-> ready-to-free") {
			removed[e.VolumeID+"/"+e.AllocID]++
		}
	}
	return removed, err
}

// driverLeftovers reports, from the driver's state and log after every
// claim was released, the disks still attached to an instance and the
// NodeStage/NodePublish calls that took effect and were never undone.
func driverLeftovers(ctx context.Context, t *testing.T, drv *GCEPD, disks int, nodes []string, calls []fault.Call) (attached, held int) {
	t.Helper()
	for i := 0; i < disks; i++ {
		for _, n := range nodes {
			att, err := drv.Control.Attached(ctx, fmt.Sprintf("disk-%d", i), n)
			if err != nil {
				t.Fatal(err)
			}
			if att {
				attached++
				t.Errorf("disk-%d is still attached to %s after every claim was released", i, n)
			}
		}
	}
	open := map[string]int{}
	for _, c := range calls {
		if c.Code != "OK" && !(c.Ran && c.DriverCode == "OK") {
			continue
		}
		switch c.Method {
		case "NodeStageVolume", "NodePublishVolume":
			open[c.Service+" "+c.Method[len("Node"):len(c.Method)-len("Volume")]+" "+c.VolumeID]++
		case "NodeUnstageVolume":
			open[c.Service+" Stage "+c.VolumeID] = 0
		case "NodeUnpublishVolume":
			open[c.Service+" Publish "+c.VolumeID] = 0
		}
	}
	for k, n := range open {
		if n > 0 {
			held++
			t.Errorf("driver log: %s took effect and was never undone", k)
		}
	}
	return attached, held
}

// overlappingDetaches counts ControllerUnpublishVolume calls of one
// volume that overlapped at the driver (two servers detaching at once).
func overlappingDetaches(t *testing.T, calls []fault.Call) int {
	t.Helper()
	byVol := map[string][]fault.Call{}
	for _, c := range calls {
		if c.Method == "ControllerUnpublishVolume" {
			byVol[c.VolumeID] = append(byVol[c.VolumeID], c)
		}
	}
	n := 0
	for vol, cs := range byVol {
		sort.Slice(cs, func(i, j int) bool { return cs[i].Start.Before(cs[j].Start) })
		for i := 1; i < len(cs); i++ {
			for j := 0; j < i; j++ {
				if cs[i].Start.Before(cs[j].End) {
					n++
					t.Errorf("overlapping ControllerUnpublish of %s: %s from %s [%s, %s] and from %s [%s, %s]", vol,
						cs[j].Code, cs[j].Caller, cs[j].Start.Format(time.StampMicro), cs[j].End.Format(time.StampMicro),
						cs[i].Caller, cs[i].Start.Format(time.StampMicro), cs[i].End.Format(time.StampMicro))
				}
			}
		}
	}
	return n
}

// digestResult is `volhost operator raft digest -json`.
type digestResult struct {
	Index   uint64 `json:"index"`
	Servers []struct {
		Server       string `json:"server"`
		Build        string `json:"build"`
		CommandIndex uint64 `json:"command_index"`
		Digest       string `json:"digest"`
	} `json:"servers"`
	Errors  []string `json:"errors"`
	Verdict string   `json:"verdict"`
}

// compareDigests runs `volhost operator raft digest` (through any live
// server, with its binary) until every server of the configuration answers the
// same command index, and fails the test if their digests differ there.
// Writes that go on between the servers' answers (a node agent's
// heartbeat) leave them at different indexes: asked again.
func compareDigests(ctx context.Context, t *testing.T, cl *Cluster, servers int) digestResult {
	t.Helper()
	var last digestResult
	var lastOut string
	err := Poll(ctx, 200*time.Millisecond, func() (bool, error) {
		s := cl.Any(0)
		if s == nil {
			return false, nil
		}
		out, _, err := s.CLI(ctx, "operator", "raft", "digest", "-json")
		if err != nil {
			return false, err
		}
		lastOut = out
		var r digestResult
		if json.Unmarshal([]byte(out), &r) != nil {
			return false, nil
		}
		last = r
		if strings.HasPrefix(r.Verdict, "DIVERGED") {
			return false, fmt.Errorf("replicas diverged: %s", out)
		}
		return strings.HasPrefix(r.Verdict, "identical") && len(r.Servers) == servers && len(r.Errors) == 0, nil
	})
	if err != nil {
		t.Fatalf("digests: %v (last answer: %s)", err, lastOut)
	}
	t.Logf("digests: %s at command index %d (%s)", last.Verdict, last.Servers[0].CommandIndex, last.Servers[0].Digest[:16])
	return last
}
