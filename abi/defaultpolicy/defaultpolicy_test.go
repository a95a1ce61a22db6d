package defaultpolicy

import (
	"reflect"
	"testing"

	"github.com/volhost/volhost/abi"
)

func TestDecide(t *testing.T) {
	claim := func(alloc, node, state string) abi.ClaimView {
		return abi.ClaimView{AllocID: alloc, NodeID: node, State: state}
	}
	ready := []abi.NodeView{{ID: "n1", Status: NodeReady}}
	tests := []struct {
		name   string
		claim  abi.ClaimView
		allocs []abi.AllocView
		nodes  []abi.NodeView
		want   abi.Decision
	}{
		{"running waits", claim("a", "n1", ClaimTaken), []abi.AllocView{{ID: "a", ClientStatus: AllocRunning}}, ready,
			abi.Decision{AllocID: "a", Action: abi.ActionWait, Reason: "allocation running"}},
		{"pending waits", claim("a", "n1", ClaimTaken), []abi.AllocView{{ID: "a", ClientStatus: AllocPending}}, ready,
			abi.Decision{AllocID: "a", Action: abi.ActionWait, Reason: "allocation pending"}},
		{"unknown status waits", claim("a", "n1", ClaimTaken), []abi.AllocView{{ID: "a", ClientStatus: "evicting"}}, ready,
			abi.Decision{AllocID: "a", Action: abi.ActionWait, Reason: "allocation evicting"}},
		{"empty status waits", claim("a", "n1", ClaimTaken), []abi.AllocView{{ID: "a"}}, ready,
			abi.Decision{AllocID: "a", Action: abi.ActionWait, Reason: "allocation unknown"}},
		{"complete on ready node releases", claim("a", "n1", ClaimTaken), []abi.AllocView{{ID: "a", ClientStatus: AllocComplete}}, ready,
			abi.Decision{AllocID: "a", Action: abi.ActionRelease, Reason: "allocation complete"}},
		{"failed releases", claim("a", "n1", ClaimTaken), []abi.AllocView{{ID: "a", ClientStatus: AllocFailed}}, ready,
			abi.Decision{AllocID: "a", Action: abi.ActionRelease, Reason: "allocation failed"}},
		{"lost on down node skips node", claim("a", "n1", ClaimTaken), []abi.AllocView{{ID: "a", ClientStatus: AllocLost}}, []abi.NodeView{{ID: "n1", Status: NodeDown}},
			abi.Decision{AllocID: "a", Action: abi.ActionReleaseSkipNode, Reason: "allocation lost, node down: skip node step"}},
		{"alloc absent is gone", claim("a", "n1", ClaimTaken), nil, ready,
			abi.Decision{AllocID: "a", Action: abi.ActionRelease, Reason: "allocation gone"}},
		{"alloc gone, node absent skips node", claim("a", "n9", ClaimTaken), []abi.AllocView{{ID: "a", ClientStatus: AllocGone}}, ready,
			abi.Decision{AllocID: "a", Action: abi.ActionReleaseSkipNode, Reason: "allocation gone, node gone: skip node step"}},
		{"node gone status skips node", claim("a", "n1", ClaimTaken), []abi.AllocView{{ID: "a", ClientStatus: AllocComplete}}, []abi.NodeView{{ID: "n1", Status: NodeGone}},
			abi.Decision{AllocID: "a", Action: abi.ActionReleaseSkipNode, Reason: "allocation complete, node gone: skip node step"}},
		{"past node step on down node releases", claim("a", "n1", "node-detached"), []abi.AllocView{{ID: "a", ClientStatus: AllocComplete}}, []abi.NodeView{{ID: "n1", Status: NodeDown}},
			abi.Decision{AllocID: "a", Action: abi.ActionRelease, Reason: "allocation complete"}},
		{"running on down node still waits", claim("a", "n1", ClaimTaken), []abi.AllocView{{ID: "a", ClientStatus: AllocRunning}}, []abi.NodeView{{ID: "n1", Status: NodeDown}},
			abi.Decision{AllocID: "a", Action: abi.ActionWait, Reason: "allocation running"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := &abi.PolicyRequest{Claims: []abi.ClaimView{tc.claim}, Allocs: tc.allocs, Nodes: tc.nodes}
			got := Decide(req)
			if got.Error != "" || len(got.Decisions) != 1 || !reflect.DeepEqual(got.Decisions[0], tc.want) {
				t.Fatalf("Decide = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestDecideOnePerClaimInOrder(t *testing.T) {
	req := &abi.PolicyRequest{
		Claims: []abi.ClaimView{{AllocID: "b", State: ClaimTaken}, {AllocID: "a", State: ClaimTaken}, {AllocID: "c", State: "ready-to-free"}},
		Allocs: []abi.AllocView{{ID: "a", ClientStatus: AllocRunning}},
	}
	got := Decide(req)
	var ids []string
	for _, d := range got.Decisions {
		ids = append(ids, d.AllocID)
	}
	if !reflect.DeepEqual(ids, []string{"b", "a", "c"}) {
		t.Fatalf("decisions for %v, want b a c", ids)
	}
	if (&abi.PolicyRequest{}).Claims != nil || len(Decide(&abi.PolicyRequest{}).Decisions) != 0 {
		t.Fatal("an empty request must give no decisions")
	}
}

// Decide looks first at the claim's own position when the allocation IDs
// are known distinct; duplicates must still resolve to the last allocation
// with the ID, as DecideClaim's scan does.
func TestDecideLastAllocationWins(t *testing.T) {
	claims := func(ids ...string) (cs []abi.ClaimView) {
		for _, id := range ids {
			cs = append(cs, abi.ClaimView{AllocID: id, NodeID: "n1", State: ClaimTaken})
		}
		return cs
	}
	tests := []struct {
		name   string
		claims []abi.ClaimView
		allocs []abi.AllocView
		want   []abi.Action
	}{
		{"aligned distinct", claims("a", "b"),
			[]abi.AllocView{{ID: "a", ClientStatus: AllocRunning}, {ID: "b", ClientStatus: AllocComplete}},
			[]abi.Action{abi.ActionWait, abi.ActionRelease}},
		{"duplicate at the claim's position", claims("a", "b"),
			[]abi.AllocView{{ID: "a", ClientStatus: AllocRunning}, {ID: "b", ClientStatus: AllocRunning}, {ID: "a", ClientStatus: AllocComplete}},
			[]abi.Action{abi.ActionRelease, abi.ActionWait}},
		{"same ID twice, aligned", claims("a", "a"),
			[]abi.AllocView{{ID: "a", ClientStatus: AllocComplete}, {ID: "a", ClientStatus: AllocRunning}},
			[]abi.Action{abi.ActionWait, abi.ActionWait}},
		{"other order", claims("a", "b"),
			[]abi.AllocView{{ID: "b", ClientStatus: AllocRunning}, {ID: "a", ClientStatus: AllocComplete}},
			[]abi.Action{abi.ActionRelease, abi.ActionWait}},
		{"fewer allocations than claims", claims("a", "b", "c"),
			[]abi.AllocView{{ID: "a", ClientStatus: AllocRunning}, {ID: "c", ClientStatus: AllocRunning}},
			[]abi.Action{abi.ActionWait, abi.ActionRelease, abi.ActionWait}},
		{"empty ID", claims("", "b"),
			[]abi.AllocView{{ID: "", ClientStatus: AllocRunning}, {ID: "b", ClientStatus: AllocRunning}},
			[]abi.Action{abi.ActionWait, abi.ActionWait}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := &abi.PolicyRequest{Claims: tc.claims, Allocs: tc.allocs, Nodes: []abi.NodeView{{ID: "n1", Status: NodeReady}}}
			got := Decide(req)
			ix := NewIndex(req)
			for i := range req.Claims {
				if d := got.Decisions[i]; d.Action != tc.want[i] || !reflect.DeepEqual(d, ix.DecideClaim(&req.Claims[i])) {
					t.Errorf("claim %d: Decide %+v, DecideClaim %+v, want action %v", i, d, ix.DecideClaim(&req.Claims[i]), tc.want[i])
				}
			}
		})
	}
}

func TestDistinctIDs(t *testing.T) {
	views := func(ids ...string) (vs []abi.AllocView) {
		for _, id := range ids {
			vs = append(vs, abi.AllocView{ID: id})
		}
		return vs
	}
	tests := []struct {
		name   string
		allocs []abi.AllocView
		want   bool
	}{
		{"none", nil, true},
		{"numbered", views("alloc-0", "alloc-1", "alloc-2", "alloc-3", "alloc-4", "alloc-5", "alloc-6", "alloc-7"), true},
		{"uuids", views("5f1c2b7e-8a41-4c55-9d1e-0c7a3e2f9b10", "a3d9e6f2-1b7c-4e8a-b5d4-7f2e9c1a6b83"), true},
		{"duplicate", views("alloc-0", "alloc-1", "alloc-0"), false},
		{"empty ID", views("", "a"), false},
	}
	for _, tc := range tests {
		if got := distinctIDs(tc.allocs); got != tc.want {
			t.Errorf("%s: distinctIDs = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// Above indexThreshold the index switches to maps: the decisions must not change.
func TestDecideLargeRequestMatchesSmall(t *testing.T) {
	statuses := []string{AllocRunning, AllocComplete, AllocLost, AllocFailed, AllocPending, ""}
	nodeStatus := []string{NodeReady, NodeDown, NodeGone}
	req := &abi.PolicyRequest{}
	for i := 0; i < 3*indexThreshold; i++ {
		id := string(rune('A'+i%26)) + string(rune('a'+i/26))
		req.Claims = append(req.Claims, abi.ClaimView{AllocID: id, NodeID: "n" + id, State: ClaimTaken})
		if i%7 != 0 { // some allocations absent: gone
			req.Allocs = append(req.Allocs, abi.AllocView{ID: id, ClientStatus: statuses[i%len(statuses)]})
		}
		if i%5 != 0 { // some nodes absent: gone
			req.Nodes = append(req.Nodes, abi.NodeView{ID: "n" + id, Status: nodeStatus[i%len(nodeStatus)]})
		}
	}
	big := Decide(req)
	for i := range req.Claims {
		small := &abi.PolicyRequest{Claims: req.Claims[i : i+1]}
		if a := NewIndex(req).Alloc(req.Claims[i].AllocID); a != nil {
			small.Allocs = []abi.AllocView{*a}
		}
		if n := NewIndex(req).Node(req.Claims[i].NodeID); n != nil {
			small.Nodes = []abi.NodeView{*n}
		}
		if got := Decide(small).Decisions[0]; !reflect.DeepEqual(got, big.Decisions[i]) {
			t.Fatalf("claim %d: small request %+v, large %+v", i, got, big.Decisions[i])
		}
	}
}

func BenchmarkDecide8(b *testing.B) {
	req := &abi.PolicyRequest{}
	for i := 0; i < 8; i++ {
		id := string(rune('a' + i))
		req.Claims = append(req.Claims, abi.ClaimView{AllocID: id, NodeID: "n" + id, State: ClaimTaken})
		req.Allocs = append(req.Allocs, abi.AllocView{ID: id, ClientStatus: AllocComplete})
		req.Nodes = append(req.Nodes, abi.NodeView{ID: "n" + id, Status: NodeReady})
	}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		Decide(req)
	}
}

// TestCorpusInvariants checks the default policy over the whole corpus
// against its rules, stated independently of the implementation.
func TestCorpusInvariants(t *testing.T) {
	corpus := Corpus()
	if len(corpus) < 150 {
		t.Fatalf("corpus has %d requests, want the full cross product", len(corpus))
	}
	for ri, req := range corpus {
		resp := Decide(req)
		if len(resp.Decisions) != len(req.Claims) || resp.Error != "" {
			t.Fatalf("request %d: %d decisions for %d claims (error %q)", ri, len(resp.Decisions), len(req.Claims), resp.Error)
		}
		for i, d := range resp.Decisions {
			c := req.Claims[i]
			var alloc *abi.AllocView
			for j := range req.Allocs {
				if req.Allocs[j].ID == c.AllocID {
					alloc = &req.Allocs[j]
				}
			}
			nodeDown := true
			for _, n := range req.Nodes {
				if n.ID == c.NodeID {
					nodeDown = n.Status == NodeDown || n.Status == NodeGone
				}
			}
			terminal := alloc == nil || map[string]bool{"complete": true, "failed": true, "lost": true, "gone": true}[alloc.ClientStatus]
			var want abi.Action
			switch {
			case !terminal:
				want = abi.ActionWait
			case c.State == ClaimTaken && nodeDown:
				want = abi.ActionReleaseSkipNode
			default:
				want = abi.ActionRelease
			}
			if d.AllocID != c.AllocID || d.Action != want || d.RetryAfterMs != 0 || d.Reason == "" {
				t.Fatalf("request %d claim %+v (alloc %+v): decision %+v, want action %d", ri, c, alloc, d, want)
			}
		}
	}
}

// The corpus survives the wire: what the host encodes is what a guest decodes.
func TestCorpusRoundTrips(t *testing.T) {
	for i, req := range Corpus() {
		var got abi.PolicyRequest
		if err := got.Unmarshal(req.MarshalAppend(nil)); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if !reflect.DeepEqual(Decide(&got), Decide(req)) {
			t.Fatalf("request %d: decisions differ after a round trip", i)
		}
	}
}

// DecideInto with one response reused over the whole corpus (as the guest
// SDK's HandleReleaseInto does: larger requests, smaller, empty) answers
// what Decide does, and once the response is large enough it allocates
// nothing for the known statuses.
func TestDecideIntoMatchesDecide(t *testing.T) {
	var resp abi.PolicyResponse
	resp.Error = "left over from an earlier call"
	for round := range 2 {
		for i, req := range Corpus() {
			DecideInto(req, &resp)
			if want := Decide(req); !reflect.DeepEqual(&resp, want) {
				t.Fatalf("round %d request %d: DecideInto %+v, Decide %+v", round, i, resp, *want)
			}
		}
	}
	req := Corpus()[len(Corpus())-2] // a multi-claim volume
	if len(req.Claims) < 2 {
		t.Fatalf("the corpus shape changed: %d claims", len(req.Claims))
	}
	DecideInto(req, &resp)
	if n := testing.AllocsPerRun(100, func() { DecideInto(req, &resp) }); n != 0 {
		t.Fatalf("DecideInto makes %.0f allocations per call with a reused response, want 0", n)
	}
	if n := testing.AllocsPerRun(100, func() { Decide(req) }); n == 0 {
		t.Fatal("Decide allocates nothing: the check above proves nothing")
	}
}
