package state

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/volhost/volhost/host/structs"
)

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// fixture is a store loaded with testdata/base.json and a counter that hands
// out raft indexes.
type fixture struct {
	t   testing.TB
	s   *Store
	clk *clockwork.FakeClock
	idx uint64
}

type baseData struct {
	Plugins []*structs.Plugin `json:"plugins"`
	Nodes   []*structs.Node   `json:"nodes"`
	Allocs  []*structs.Alloc  `json:"allocs"`
	Volumes []*structs.Volume `json:"volumes"`
}

func loadBase(t testing.TB) baseData {
	t.Helper()
	raw, err := os.ReadFile("testdata/base.json")
	if err != nil {
		t.Fatal(err)
	}
	var b baseData
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&b); err != nil {
		t.Fatalf("testdata/base.json: %v", err)
	}
	return b
}

// newEmpty returns a fixture with an empty store.
func newEmpty(t testing.TB, opts ...Option) *fixture {
	clk := clockwork.NewFakeClockAt(t0)
	return &fixture{t: t, clk: clk, s: NewStore(append([]Option{WithClock(clk)}, opts...)...), idx: 100}
}

// newFixture returns a fixture with the base data applied.
func newFixture(t testing.TB, opts ...Option) *fixture {
	t.Helper()
	f := newEmpty(t, opts...)
	b := loadBase(t)
	for _, p := range b.Plugins {
		f.must(structs.PluginUpsertType, &structs.PluginUpsertRequest{Plugin: p})
	}
	for _, n := range b.Nodes {
		f.must(structs.NodeUpsertType, &structs.NodeUpsertRequest{Node: n})
	}
	f.must(structs.AllocUpsertType, &structs.AllocUpsertRequest{Allocs: b.Allocs})
	f.must(structs.VolumeRegisterType, &structs.VolumeRegisterRequest{Volumes: b.Volumes})
	return f
}

func (f *fixture) apply(t structs.MessageType, req any) (any, error) {
	f.idx++
	return f.s.Apply(f.idx, t, req)
}

func (f *fixture) must(t structs.MessageType, req any) any {
	f.t.Helper()
	resp, err := f.apply(t, req)
	if err != nil {
		f.t.Fatalf("apply %d: %v", t, err)
	}
	return resp
}

func (f *fixture) digest() string {
	f.t.Helper()
	d, err := f.s.Digest()
	if err != nil {
		f.t.Fatal(err)
	}
	return d
}

func (f *fixture) volume(ns, id string) *structs.Volume {
	f.t.Helper()
	v, err := f.s.Snapshot().VolumeByID(nil, ns, id)
	if err != nil {
		f.t.Fatal(err)
	}
	return v
}

func (f *fixture) alloc(id string) *structs.Alloc {
	f.t.Helper()
	a, err := f.s.Snapshot().AllocByID(nil, id)
	if err != nil {
		f.t.Fatal(err)
	}
	return a
}

func (f *fixture) node(id string) *structs.Node {
	f.t.Helper()
	n, err := f.s.Snapshot().NodeByID(nil, id)
	if err != nil {
		f.t.Fatal(err)
	}
	return n
}

func (f *fixture) index(table string) uint64 {
	f.t.Helper()
	i, err := f.s.Snapshot().Index(table)
	if err != nil {
		f.t.Fatal(err)
	}
	return i
}

func (f *fixture) events() []*structs.Event {
	f.t.Helper()
	evs, err := f.s.Snapshot().Events(nil, 0)
	if err != nil {
		f.t.Fatal(err)
	}
	return evs
}

// claim records a taken claim of alloc on its node.
func (f *fixture) claim(volID, allocID string, mode structs.ClaimMode) {
	f.t.Helper()
	a := f.alloc(allocID)
	f.must(structs.VolumeClaimType, &structs.VolumeClaimRequest{
		Namespace: "default", VolumeID: volID,
		Claim: &structs.Claim{AllocID: allocID, NodeID: a.NodeID, Mode: mode, ExternalNodeID: "ext-" + a.NodeID},
	})
}

// publishing writes allocID's claim ahead of its publish (state
// publishing) and returns the index it was committed at.
func (f *fixture) publishing(volID, allocID string, mode structs.ClaimMode) uint64 {
	f.t.Helper()
	a := f.alloc(allocID)
	f.must(structs.VolumeClaimType, &structs.VolumeClaimRequest{
		Namespace: "default", VolumeID: volID,
		Claim: &structs.Claim{AllocID: allocID, NodeID: a.NodeID, Mode: mode, State: structs.ClaimPublishing,
			ExternalNodeID: "ext-" + a.NodeID, TargetPath: "/t/" + allocID, StagingPath: "/s/" + volID},
	})
	return f.idx
}

// setAlloc changes an allocation's client status.
func (f *fixture) setAlloc(id string, st structs.AllocClientStatus) {
	f.t.Helper()
	a := f.alloc(id).Copy()
	a.ClientStatus = st
	f.must(structs.AllocUpsertType, &structs.AllocUpsertRequest{Allocs: []*structs.Alloc{a}})
}

// checkpoint moves a claim to state.
func (f *fixture) checkpoint(volID, allocID string, state structs.ClaimState) error {
	f.t.Helper()
	c := f.volume("default", volID).Claims[allocID].Copy()
	c.State = state
	_, err := f.apply(structs.ClaimCheckpointType, &structs.ClaimCheckpointRequest{Namespace: "default", VolumeID: volID, Claim: c})
	return err
}

// errKind names the class of a typed error for table assertions.
func errKind(err error) string {
	var ve *structs.ValidationError
	switch {
	case err == nil:
		return "ok"
	case errors.As(err, &ve):
		return "invalid:" + ve.Field
	case errors.Is(err, structs.ErrNotFound):
		return "notfound"
	case errors.Is(err, structs.ErrConflict):
		return "conflict"
	}
	return "other:" + err.Error()
}
