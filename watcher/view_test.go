package watcher

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/watcher/attach"
)

// TestViewOfIsThePassView: the recorded policy view is the request a
// release pass hands the policy at the same time, field for field; the
// adapter view is the one the pass builds for that claim and step.
func TestViewOfIsThePassView(t *testing.T) {
	pol := &recordingPolicy{}
	f := newFixture(t, Config{}, testModules{policy: pol})
	f.store.putNode(readyNode("n2"))
	f.store.putAlloc("a1", testNode, structs.AllocRunning)
	f.store.putAlloc("a2", "n2", structs.AllocRunning)
	f.store.putVolume(newVolume("v1", newClaim("a1", testNode, structs.ClaimTaken), newClaim("a2", "n2", structs.ClaimTaken)))
	f.store.putAlloc("a2", "n2", structs.AllocComplete)
	f.clock.Advance(30 * time.Second)
	views, err := ViewOf(f.store, ref("v1"), "", "", f.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.w.assess(context.Background(), ref("v1")); err != nil {
		t.Fatal(err)
	}
	if pol.last == nil || !reflect.DeepEqual(views.Policy, pol.last) {
		t.Fatalf("recorded view\n%+v\nthe pass's request\n%+v", views.Policy, pol.last)
	}

	av, err := ViewOf(f.store, ref("v1"), StepControllerUnpublish, "a1", f.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	v, _ := f.store.Volume("default", "v1")
	n, _ := f.store.Node(testNode)
	p, _ := f.store.Plugin(testPlugin)
	if want := (attach.Subject{Volume: v, Claim: v.Claims["a1"], Node: n, Plugin: p, Now: f.clock.Now()}).Request(StepControllerUnpublish); !reflect.DeepEqual(av.Adapter, want) {
		t.Fatalf("adapter view\n%+v\nwant\n%+v", av.Adapter, want)
	}
}

func TestViewOfErrors(t *testing.T) {
	f := newFixture(t, Config{}, NativeModules())
	f.store.putVolume(newVolume("empty"))
	f.store.putAlloc("a1", testNode, structs.AllocRunning)
	f.store.putVolume(newVolume("v1", newClaim("a1", testNode, structs.ClaimTaken)))
	for _, tc := range []struct {
		vol, step, alloc string
		want             error
	}{
		{"nope", "", "", structs.ErrNotFound},
		{"empty", "", "", structs.ErrConflict},
		{"v1", "controller-unpublish", "a9", structs.ErrNotFound},
	} {
		if _, err := ViewOf(f.store, ref(tc.vol), tc.step, tc.alloc, t0); !errors.Is(err, tc.want) {
			t.Errorf("ViewOf(%s, %q, %q): %v, want %v", tc.vol, tc.step, tc.alloc, err, tc.want)
		}
	}
	var ve *structs.ValidationError
	if _, err := ViewOf(f.store, ref("v1"), "node-explode", "", t0); !errors.As(err, &ve) {
		t.Fatalf("unknown step: %v", err)
	}
}
