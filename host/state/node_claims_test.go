package state

import (
	"reflect"
	"strings"
	"testing"

	"github.com/volhost/volhost/host/structs"
)

// A node with claims still to release is deregistered only when forced
// (its claims' node steps are then skipped); the refusal names the claims
// and changes nothing; the forced write answers them.
func TestNodeDeregisterClaims(t *testing.T) {
	f := newFixture(t)
	f.claim("vol-mw", "a2", structs.ClaimWrite)
	f.claim("vol-ro", "a2", structs.ClaimRead)
	f.setAlloc("a2", structs.AllocLost)
	before := f.index(TableNodes)
	_, err := f.apply(structs.NodeDeregisterType, &structs.NodeDeregisterRequest{NodeID: "n2"})
	if errKind(err) != "conflict" || !strings.Contains(err.Error(), `node "n2" still has 2 claim(s) to release: default/vol-mw (alloc a2, taken), default/vol-ro (alloc a2, taken)`) ||
		!strings.Contains(err.Error(), "force") {
		t.Fatalf("unforced: %v", err)
	}
	if f.node("n2") == nil || f.index(TableNodes) != before {
		t.Fatal("a refused deregister changed the nodes")
	}
	resp := f.must(structs.NodeDeregisterType, &structs.NodeDeregisterRequest{NodeID: "n2", Force: true})
	want := []structs.NodeClaim{{Namespace: "default", VolumeID: "vol-mw", AllocID: "a2", State: structs.ClaimTaken},
		{Namespace: "default", VolumeID: "vol-ro", AllocID: "a2", State: structs.ClaimTaken}}
	if !reflect.DeepEqual(resp, want) {
		t.Fatalf("answer %#v, want %#v", resp, want)
	}
	if f.node("n2") != nil {
		t.Fatal("node still there")
	}
	// A node with no claims needs no force.
	f.setAlloc("a6", structs.AllocComplete)
	if resp := f.must(structs.NodeDeregisterType, &structs.NodeDeregisterRequest{NodeID: "n3"}); resp != nil && len(resp.([]structs.NodeClaim)) != 0 {
		t.Fatalf("answer %v", resp)
	}
}
