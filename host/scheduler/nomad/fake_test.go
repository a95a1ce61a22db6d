package nomad

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/volhost/volhost/host/scheduler"
	"github.com/volhost/volhost/host/state"
	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/internal/testutil"
)

// fakeNomad is a Nomad whose nodes, allocations and event stream the test
// sets. Each Stream call opens a new stream the test pushes batches into.
type fakeNomad struct {
	mu       sync.Mutex
	nodes    map[string]Node
	allocs   map[string]Alloc
	meta     map[string]map[string]string // by allocation ID
	index    uint64
	listErr  error
	streams  []chan Batch
	from     []uint64 // the index each stream started at
	metaHits int
	// nodesIndex, when set, is the index the node list is at (Nomad's
	// lists each answer their own table's index); otherwise index.
	nodesIndex uint64
}

func newFakeNomad() *fakeNomad {
	return &fakeNomad{nodes: map[string]Node{}, allocs: map[string]Alloc{}, meta: map[string]map[string]string{}}
}

func (f *fakeNomad) Nodes(ctx context.Context) ([]Node, uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.listErr != nil {
		return nil, 0, f.listErr
	}
	idx := f.index
	if f.nodesIndex != 0 {
		idx = f.nodesIndex
	}
	return slices.Collect(maps.Values(f.nodes)), idx, nil
}

func (f *fakeNomad) Allocs(ctx context.Context) ([]Alloc, uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.listErr != nil {
		return nil, 0, f.listErr
	}
	return slices.Collect(maps.Values(f.allocs)), f.index, nil
}

func (f *fakeNomad) Meta(ctx context.Context, allocID string) (map[string]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.metaHits++
	m, ok := f.meta[allocID]
	if !ok {
		return nil, fmt.Errorf("allocation %s not found", allocID)
	}
	return maps.Clone(m), nil
}

func (f *fakeNomad) Stream(ctx context.Context, index uint64) (<-chan Batch, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.listErr != nil {
		return nil, f.listErr
	}
	ch := make(chan Batch, 16)
	f.streams = append(f.streams, ch)
	f.from = append(f.from, index)
	return ch, nil
}

// setNode / setAlloc change Nomad's state (for the next list) and return
// the object at a new index.
func (f *fakeNomad) setNode(n Node) Node {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.index++
	n.ModifyIndex = f.index
	f.nodes[n.ID] = n
	return n
}

func (f *fakeNomad) setAlloc(a Alloc, meta map[string]string) Alloc {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.index++
	a.ModifyIndex = f.index
	f.allocs[a.ID] = a
	if meta != nil {
		f.meta[a.ID] = meta
	}
	return a
}

func (f *fakeNomad) remove(nodeIDs, allocIDs []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.index++
	for _, id := range nodeIDs {
		delete(f.nodes, id)
	}
	for _, id := range allocIDs {
		delete(f.allocs, id)
	}
}

// push sends a batch on the newest stream (the change is also in the list).
func (f *fakeNomad) push(t *testing.T, b Batch) {
	t.Helper()
	f.mu.Lock()
	if b.Index == 0 {
		b.Index = f.index
	}
	ch := f.streams[len(f.streams)-1]
	f.mu.Unlock()
	ch <- b
}

func (f *fakeNomad) streamCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.streams)
}

// storeWriter is the server's writes without a server: each request is
// validated and applied by the real store, so the store's rules judge
// the bridge.
type storeWriter struct {
	mu       sync.Mutex
	s        *state.Store
	idx      uint64
	term     uint64 // the current leadership term: an entry of another is refused like the FSM does
	claimErr map[string]error
	claims   []string
	syncs    int
	// claimGate, when set, holds each claim until the test sends on it.
	claimGate chan struct{}
	// syncErr, when set, is the answer of the next scheduler sync, which
	// commits nothing (a leader lost before the entry reached the log).
	syncErr error
}

func (w *storeWriter) apply(t structs.MessageType, req any, term uint64) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if term != 0 && term != w.term {
		return fmt.Errorf("entry of term %d appended in term %d: %w", term, w.term, structs.ErrStaleTerm)
	}
	w.idx++
	_, err := w.s.Apply(w.idx, t, req)
	return err
}

func (w *storeWriter) SchedulerSync(ctx context.Context, req *structs.SchedulerSyncRequest) (uint64, error) {
	w.mu.Lock()
	w.syncs++
	err := w.syncErr
	w.syncErr = nil
	w.mu.Unlock()
	if err != nil {
		return 0, err
	}
	return 0, w.apply(structs.SchedulerSyncType, req, req.Term)
}

func (w *storeWriter) NodeLiveness(ctx context.Context, req *structs.NodeLivenessRequest) error {
	return w.apply(structs.NodeLivenessType, req, req.Term)
}

func (w *storeWriter) ClaimVolume(ctx context.Context, req *structs.ClaimRequest) (*structs.Claim, error) {
	w.mu.Lock()
	err := w.claimErr[req.VolumeID]
	w.claims = append(w.claims, req.AllocID+"/"+req.VolumeID)
	term, gate := w.term, w.claimGate
	w.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if err != nil {
		return nil, err
	}
	vol, err := w.s.Snapshot().VolumeByID(nil, req.Namespace, req.VolumeID)
	if err != nil {
		return nil, err
	}
	if vol == nil {
		return nil, structs.NotFound("volume", req.Namespace+"/"+req.VolumeID)
	}
	c := &structs.Claim{AllocID: req.AllocID, NodeID: req.NodeID, Mode: req.Mode, AccessMode: vol.AccessMode,
		AttachmentMode: vol.AttachmentMode, State: structs.ClaimTaken, CreateTime: t0, ModifyTime: t0}
	return c, w.apply(structs.VolumeClaimType, &structs.VolumeClaimRequest{Namespace: req.Namespace, VolumeID: req.VolumeID, Claim: c, Term: term}, term)
}

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// harness is a bridge over a fakeNomad and a real store with nodes n1 and
// n2 (direct mode), plugin p and volumes v1 (single writer), v2.
type harness struct {
	t      *testing.T
	nomad  *fakeNomad
	w      *storeWriter
	store  *state.Store
	clock  *clockwork.FakeClock
	bridge *Bridge
	cancel context.CancelFunc
	done   chan struct{}
}

func newHarness(t *testing.T) *harness {
	return newHarnessWith(t, Config{RelistInterval: "1m"})
}

// newHarnessWith is newHarness with the bridge's configuration cfg.
func newHarnessWith(t *testing.T, cfg Config) *harness {
	h := &harness{t: t, nomad: newFakeNomad(), store: state.NewStore(), clock: clockwork.NewFakeClockAt(t0)}
	h.w = &storeWriter{s: h.store, term: 1, claimErr: map[string]error{}}
	must := func(typ structs.MessageType, req any) {
		if err := h.w.apply(typ, req, 0); err != nil {
			t.Fatal(err)
		}
	}
	must(structs.PluginUpsertType, &structs.PluginUpsertRequest{Plugin: &structs.Plugin{ID: "p"}})
	for _, n := range []string{"n1", "n2"} {
		must(structs.NodeUpsertType, &structs.NodeUpsertRequest{Node: &structs.Node{ID: n, Status: structs.NodeReady,
			Plugins: map[string]*structs.NodePlugin{"p": {PluginID: "p", Endpoint: "unix:///tmp/" + n + ".sock", ExternalNodeID: "ext-" + n}}}})
	}
	must(structs.VolumeRegisterType, &structs.VolumeRegisterRequest{Volumes: []*structs.Volume{
		{Namespace: "default", ID: "v1", ExternalID: "d1", PluginID: "p", AccessMode: structs.AccessSingleNodeWriter, AttachmentMode: structs.AttachFilesystem},
		{Namespace: "default", ID: "v2", ExternalID: "d2", PluginID: "p", AccessMode: structs.AccessMultiNodeMultiWrite, AttachmentMode: structs.AttachFilesystem},
	}})
	s, err := cfg.Validate()
	if err != nil {
		t.Fatal(err)
	}
	h.bridge, err = New(s, Deps{Nomad: h.nomad, Writer: h.w, Store: h.store, Clock: h.clock})
	if err != nil {
		t.Fatal(err)
	}
	h.nomad.setNode(Node{ID: "id-n1", Name: "n1", Status: nodeReady})
	h.nomad.setNode(Node{ID: "id-n2", Name: "n2", Status: nodeReady})
	return h
}

// start runs the bridge (term 1) and waits for its first stream.
func (h *harness) start() {
	h.startTerm(1)
}

func (h *harness) startTerm(term uint64) {
	h.t.Helper()
	n := h.nomad.streamCount()
	h.run(term)
	testutil.WaitFor(h.t, "the bridge's event stream", func() bool { return h.nomad.streamCount() > n })
}

// advance moves the fake clock by d once the bridge waits on it (its
// re-list ticker or its backoff).
func (h *harness) advance(d time.Duration) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Deadline)
	defer cancel()
	if err := h.clock.BlockUntilContext(ctx, 1); err != nil {
		h.t.Fatal(err)
	}
	h.clock.Advance(d)
}

// run starts the bridge without waiting for anything.
func (h *harness) run(term uint64) {
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel, h.done = cancel, make(chan struct{})
	go func() {
		defer close(h.done)
		_ = h.bridge.Run(ctx, term)
	}()
	h.t.Cleanup(h.stop)
}

func (h *harness) stop() {
	if h.cancel != nil {
		h.cancel()
		<-h.done
		h.cancel = nil
	}
}

func (h *harness) alloc(id string) *structs.Alloc {
	a, err := h.store.Snapshot().AllocByID(nil, id)
	if err != nil {
		h.t.Fatal(err)
	}
	return a
}

func (h *harness) claimed(vol, alloc string) bool {
	v, err := h.store.Snapshot().VolumeByID(nil, "default", vol)
	if err != nil {
		h.t.Fatal(err)
	}
	return v != nil && v.Claims[alloc] != nil
}

// claimRunning has Nomad report allocation id running on node with
// volume v1 (metaV1) and waits until the bridge has claimed v1 for it; it
// returns Nomad's allocation.
func (h *harness) claimRunning(id, node string) Alloc {
	h.t.Helper()
	a := h.nomad.setAlloc(web(id, node, clientRunning, "run"), metaV1)
	h.nomad.push(h.t, Batch{Allocs: []Alloc{a}})
	testutil.WaitFor(h.t, "the claim of v1 by "+id, func() bool { return h.claimed("v1", id) })
	return a
}

// mirrorRunning is claimRunning waiting only until the bridge has
// mirrored the allocation running.
func (h *harness) mirrorRunning(id, node string) Alloc {
	h.t.Helper()
	a := h.nomad.setAlloc(web(id, node, clientRunning, "run"), metaV1)
	h.nomad.push(h.t, Batch{Allocs: []Alloc{a}})
	h.waitStatus(id, structs.AllocRunning)
	return a
}

// lostOnDownNode has Nomad report node (Nomad ID "id-"+node) down and
// allocation id lost there, and waits for the bridge to hold it (lost on
// a down node: its task may still run).
func (h *harness) lostOnDownNode(id, node string) {
	h.t.Helper()
	n := h.nomad.setNode(Node{ID: "id-" + node, Name: node, Status: nodeDown})
	a := h.nomad.setAlloc(web(id, node, clientLost, "stop"), nil)
	h.nomad.push(h.t, Batch{Nodes: []Node{n}, Allocs: []Alloc{a}})
	testutil.WaitFor(h.t, "the hold", func() bool { return h.bridge.Status().Held == 1 })
}

// heldOnDownNode is claimRunning then lostOnDownNode: allocation id
// claimed its volume on node, then held there, lost on a down node.
func (h *harness) heldOnDownNode(id, node string) {
	h.t.Helper()
	h.claimRunning(id, node)
	h.lostOnDownNode(id, node)
}

// unreachable has Nomad's lists fail from now on (the open stream stays
// up until the test ends it).
func (h *harness) unreachable() {
	h.nomad.mu.Lock()
	h.nomad.listErr = errUnreachable
	h.nomad.mu.Unlock()
}

// unreachableAndRetrying makes Nomad unreachable and ends the stream:
// the bridge then backs off between failed lists.
func (h *harness) unreachableAndRetrying() {
	h.t.Helper()
	h.unreachable()
	h.nomad.push(h.t, Batch{Err: errors.New("unexpected EOF")})
	testutil.WaitFor(h.t, "the retrying state", func() bool { return h.bridge.Status().State == scheduler.StateRetrying })
}

// fence has an operator fence volhost node id.
func (h *harness) fence(id string) {
	h.t.Helper()
	if err := h.w.apply(structs.NodeFenceType, &structs.NodeFenceRequest{NodeID: id,
		Fence: &structs.NodeFence{Reason: "powered off", Source: structs.FenceSourceOperator, Time: t0}}, 0); err != nil {
		h.t.Fatal(err)
	}
}

// onUnknownNode has Nomad place allocation id (volume v1) on Nomad node
// n3, which volhost does not know, and waits for the problem line.
func (h *harness) onUnknownNode(id string) Alloc {
	h.t.Helper()
	n3 := h.nomad.setNode(Node{ID: "id-n3", Name: "n3", Status: nodeReady})
	a := h.nomad.setAlloc(web(id, "n3", clientRunning, "run"), metaV1)
	h.nomad.push(h.t, Batch{Nodes: []Node{n3}, Allocs: []Alloc{a}})
	testutil.WaitFor(h.t, "the unknown node's problem", func() bool { return len(h.events("which volhost does not know")) >= 1 })
	return a
}

// withGatedMeta restarts nothing: it builds h's bridge over a Nomad whose
// Meta of allocation id blocks until the test lets it go (call before
// h.start).
func (h *harness) withGatedMeta(id string) *gatedMeta {
	h.t.Helper()
	g := &gatedMeta{fakeNomad: h.nomad, id: id, entered: make(chan struct{}), release: make(chan struct{})}
	s, err := Config{RelistInterval: "1m"}.Validate()
	if err != nil {
		h.t.Fatal(err)
	}
	if h.bridge, err = New(s, Deps{Nomad: g, Writer: h.w, Store: h.store, Clock: h.clock}); err != nil {
		h.t.Fatal(err)
	}
	return g
}

// failNextSync has the next scheduler sync answer err and commit nothing.
func (h *harness) failNextSync(err error) {
	h.w.mu.Lock()
	h.w.syncErr = err
	h.w.mu.Unlock()
}

// nodeIs reports whether volhost node id has status want.
func (h *harness) nodeIs(id string, want structs.NodeStatus) func() bool {
	return func() bool {
		vn, _ := h.store.Snapshot().NodeByID(nil, id)
		return vn.Status == want
	}
}

// agentOwnsNode marks volhost node id as registered by a node agent, whose
// heartbeats own its status (Nomad's reports of it are not mirrored).
func (h *harness) agentOwnsNode(id string) {
	h.t.Helper()
	vn, _ := h.store.Snapshot().NodeByID(nil, id)
	agent := vn.Copy()
	agent.Agent = true
	if err := h.w.apply(structs.NodeUpsertType, &structs.NodeUpsertRequest{Node: agent}, 0); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) waitStatus(id string, want structs.AllocClientStatus) {
	h.t.Helper()
	testutil.WaitFor(h.t, fmt.Sprintf("allocation %s %s", id, want), func() bool {
		a := h.alloc(id)
		return a != nil && a.ClientStatus == want
	})
}

func (h *harness) cursor() uint64 {
	c, err := h.store.Snapshot().SchedulerCursor(nil, SourceName)
	if err != nil || c == nil {
		return 0
	}
	return c.Index
}

// attempts counts the claims tried for allocation alloc.
func (h *harness) attempts(alloc string) int {
	h.w.mu.Lock()
	defer h.w.mu.Unlock()
	n := 0
	for _, c := range h.w.claims {
		if strings.HasPrefix(c, alloc+"/") {
			n++
		}
	}
	return n
}

// reconnect breaks the bridge's event stream and waits for the next one
// (after the backoff and a re-list): a stream starts again at the older
// list's index, replaying changes the list already showed.
func (h *harness) reconnect() {
	h.t.Helper()
	n := h.nomad.streamCount()
	h.nomad.push(h.t, Batch{Err: errors.New("unexpected EOF")})
	testutil.WaitFor(h.t, "the retrying state", func() bool { return h.bridge.Status().State == scheduler.StateRetrying })
	h.advance(time.Second)
	testutil.WaitFor(h.t, "the next event stream", func() bool { return h.nomad.streamCount() > n })
}

func (h *harness) events(substr string) []*structs.Event {
	evs, err := h.store.Snapshot().Events(nil, 0)
	if err != nil {
		h.t.Fatal(err)
	}
	var out []*structs.Event
	for _, e := range evs {
		if e.Type == structs.EventScheduler && (substr == "" || strings.Contains(e.Message, substr)) {
			out = append(out, e)
		}
	}
	return out
}

var errUnreachable = errors.New("dial tcp 127.0.0.1:4646: connect: connection refused")

// problemsOf is the bridge status's problem lines whose key or message
// names sub.
func (h *harness) problemsOf(sub string) []string {
	var out []string
	for _, p := range h.bridge.Status().Problems {
		if strings.Contains(p.Message, sub) || strings.Contains(p.Key, sub) {
			out = append(out, p.Key+": "+p.Message)
		}
	}
	return out
}

// metaUnreadable has Nomad place allocation id on n1 with a job whose
// meta cannot be read, and waits for the problem line. It answers the
// allocation.
func (h *harness) metaUnreadable(id string) Alloc {
	h.t.Helper()
	a := h.nomad.setAlloc(web(id, "n1", clientRunning, "run"), nil) // no meta: Meta errors
	h.nomad.push(h.t, Batch{Allocs: []Alloc{a}})
	testutil.WaitFor(h.t, "the meta problem", func() bool { return len(h.events("cannot read its job's meta")) >= 1 })
	return a
}
