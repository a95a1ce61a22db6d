package watcher

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/hashicorp/go-hclog"
	"github.com/jonboulle/clockwork"

	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/internal/testutil"
)

// t0 is the fake clock's start.
var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// fakeStore implements VolumeFeed, StateReader and ClaimWriter over maps,
// with a change log so the blocking query costs O(changes).
type fakeStore struct {
	// mu is a read-write lock because go-memdb, which the fake stands in
	// for, serves reads without blocking each other: with one mutex the
	// benchmarks' 16 workers queued behind each other's reads, which
	// measured the fake, not the watcher.
	mu      sync.RWMutex
	index   uint64
	changed chan struct{} // closed and replaced on every write
	vols    map[structs.VolumeRef]*structs.Volume
	allocs  map[string]*structs.Alloc
	nodes   map[string]*structs.Node
	plugins map[string]*structs.Plugin
	log     []change

	checkpoints []*structs.ClaimCheckpointRequest
	stucks      []*structs.VolumeStuckRequest
	gcs         []*structs.ClaimGCRequest
	forced      []*structs.VolumeDeregisterRequest
	fences      []*structs.NodeFenceRequest // module fences (confirmfence_test.go)
	failWrites  error
	noRecord    bool // benchmarks: keep no history
}

type change struct {
	index uint64
	ref   structs.VolumeRef
}

func newFakeStore() *fakeStore {
	return &fakeStore{
		changed: make(chan struct{}),
		vols:    make(map[structs.VolumeRef]*structs.Volume),
		allocs:  make(map[string]*structs.Alloc),
		nodes:   make(map[string]*structs.Node),
		plugins: make(map[string]*structs.Plugin),
	}
}

func (s *fakeStore) bumpLocked(refs ...structs.VolumeRef) uint64 {
	s.index++
	for _, ref := range refs {
		if v := s.vols[ref]; v != nil {
			v.ModifyIndex = s.index
		}
		s.log = append(s.log, change{s.index, ref})
	}
	close(s.changed)
	s.changed = make(chan struct{})
	return s.index
}

func (s *fakeStore) VolumesChangedSince(ctx context.Context, index uint64) ([]*structs.Volume, uint64, error) {
	for {
		s.mu.RLock()
		if s.index > index {
			var out []*structs.Volume
			if index == 0 {
				for _, v := range s.vols {
					out = append(out, v.Copy())
				}
			} else {
				seen := make(map[structs.VolumeRef]bool)
				i := sort.Search(len(s.log), func(i int) bool { return s.log[i].index > index })
				for _, c := range s.log[i:] {
					if v := s.vols[c.ref]; v != nil && !seen[c.ref] {
						seen[c.ref] = true
						out = append(out, v.Copy())
					}
				}
			}
			idx := s.index
			s.mu.RUnlock()
			return out, idx, nil
		}
		ch := s.changed
		s.mu.RUnlock()
		select {
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		case <-ch:
		}
	}
}

func (s *fakeStore) Volume(ns, id string) (*structs.Volume, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.vols[structs.VolumeRef{Namespace: ns, ID: id}].Copy(), nil
}

func (s *fakeStore) Alloc(id string) (*structs.Alloc, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.allocs[id].Copy(), nil
}

func (s *fakeStore) Node(id string) (*structs.Node, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.nodes[id].Copy(), nil
}

func (s *fakeStore) NodeOfMachine(m structs.Machine) (*structs.Node, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, n := range s.nodes {
		if np := n.Plugins[m.PluginID]; np != nil && np.ExternalNodeID == m.ExternalNodeID {
			return n.Copy(), nil
		}
	}
	return nil, nil
}

func (s *fakeStore) Plugin(id string) (*structs.Plugin, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.plugins[id].Copy(), nil
}

func (s *fakeStore) ReleasableVolumes() ([]structs.VolumeRef, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []structs.VolumeRef
	for ref, v := range s.vols {
		for _, c := range v.Claims {
			if a := s.allocs[c.AllocID]; a == nil || a.ClientStatus.Terminal() {
				out = append(out, ref)
				break
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

func (s *fakeStore) CheckpointClaim(_ context.Context, req *structs.ClaimCheckpointRequest) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failWrites != nil {
		return 0, s.failWrites
	}
	ref := structs.VolumeRef{Namespace: req.Namespace, ID: req.VolumeID}
	v := s.vols[ref]
	if v == nil || v.Claims[req.Claim.AllocID] == nil {
		return 0, structs.NotFound("claim", req.Claim.AllocID)
	}
	if !s.noRecord {
		ck := *req
		ck.Claim = req.Claim.Copy()
		s.checkpoints = append(s.checkpoints, &ck)
		if req.Free {
			// The store applies both transitions (state.checkpointClaim);
			// the tests see both states, both marked Free, so one write
			// is told from two.
			freed := ck
			freed.Claim = req.Claim.Copy()
			freed.Claim.State = structs.ClaimReadyToFree
			s.checkpoints = append(s.checkpoints, &freed)
		}
	}
	if req.Claim.State == structs.ClaimReadyToFree || req.Free {
		delete(v.Claims, req.Claim.AllocID)
	} else {
		v.Claims[req.Claim.AllocID] = req.Claim.Copy()
	}
	return s.bumpLocked(ref), nil
}

func (s *fakeStore) MarkStuck(_ context.Context, req *structs.VolumeStuckRequest) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failWrites != nil {
		return 0, s.failWrites
	}
	ref := structs.VolumeRef{Namespace: req.Namespace, ID: req.VolumeID}
	v := s.vols[ref]
	if v == nil {
		return 0, structs.NotFound("volume", req.VolumeID)
	}
	s.stucks = append(s.stucks, req)
	v.Stuck = req.Stuck
	return s.bumpLocked(ref), nil
}

func (s *fakeStore) GCClaims(_ context.Context, req *structs.ClaimGCRequest) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gcs = append(s.gcs, req)
	return s.bumpLocked(req.Volumes...), nil
}

func (s *fakeStore) ForceDeregister(_ context.Context, req *structs.VolumeDeregisterRequest) ([]*structs.Leftover, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ref := structs.VolumeRef{Namespace: req.Namespace, ID: req.VolumeID}
	v := s.vols[ref]
	if v == nil {
		return nil, structs.NotFound("volume", req.VolumeID)
	}
	s.forced = append(s.forced, req)
	var out []*structs.Leftover
	for _, c := range v.Claims {
		out = append(out, &structs.Leftover{Namespace: v.Namespace, VolumeID: v.ID, AllocID: c.AllocID, NodeID: c.NodeID, State: c.State, Reason: req.Reason})
	}
	delete(s.vols, ref)
	s.bumpLocked(ref)
	return out, nil
}

// Test setters. putVolume bumps the volume; putAlloc does not (the real
// store may not bump volumes on alloc updates: the GC claim covers it).
func (s *fakeStore) putVolume(v *structs.Volume) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ref := structs.VolumeRef{Namespace: v.Namespace, ID: v.ID}
	s.vols[ref] = v.Copy()
	s.bumpLocked(ref)
}

func (s *fakeStore) touch(ref structs.VolumeRef) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.bumpLocked(ref)
}

func (s *fakeStore) putAlloc(id, node string, status structs.AllocClientStatus) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.allocs[id] = &structs.Alloc{ID: id, Namespace: "default", NodeID: node, ClientStatus: status, ModifyTime: t0}
}

func (s *fakeStore) deleteAlloc(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.allocs, id)
}

func (s *fakeStore) putNode(n *structs.Node) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nodes[n.ID] = n.Copy()
}

func (s *fakeStore) putPlugin(p *structs.Plugin) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.plugins[p.ID] = p.Copy()
}

func (s *fakeStore) claim(ref structs.VolumeRef, alloc string) *structs.Claim {
	s.mu.Lock()
	defer s.mu.Unlock()
	if v := s.vols[ref]; v != nil {
		return v.Claims[alloc].Copy()
	}
	return nil
}

func (s *fakeStore) stuck(ref structs.VolumeRef) *structs.Stuck {
	s.mu.Lock()
	defer s.mu.Unlock()
	if v := s.vols[ref]; v != nil && v.Stuck != nil {
		st := *v.Stuck
		return &st
	}
	return nil
}

func (s *fakeStore) checkpointStates() []structs.ClaimState {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []structs.ClaimState
	for _, c := range s.checkpoints {
		st := c.Claim.State
		if st == structs.ClaimTaken && c.Claim.NodeUnpublished {
			st = unpublishedMark
		}
		out = append(out, st)
	}
	return out
}

// unpublishedMark is how checkpointStates shows a taken claim checkpointed
// with its NodeUnpublish done (committed before NodeUnstage runs, so a
// retry never repeats the unpublish).
const unpublishedMark structs.ClaimState = "taken/node-unpublished"

func (s *fakeStore) checkpointCalls() []*structs.ClaimCheckpointRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*structs.ClaimCheckpointRequest(nil), s.checkpoints...)
}

func (s *fakeStore) stuckCalls() []*structs.VolumeStuckRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*structs.VolumeStuckRequest(nil), s.stucks...)
}

// csiCall is one recorded CSI call.
type csiCall struct {
	Method   string
	Endpoint string
	VolumeID string
	NodeID   string
	Path     string
	Secrets  map[string]string
}

// fakeCSI implements attach.NodeSteps and ControllerCSI with scripted
// errors, an optional blocking mode and in-flight accounting.
type fakeCSI struct {
	mu        sync.Mutex
	calls     []csiCall
	script    map[string][]error // method -> errors to return in order (nil = OK)
	block     map[string]bool    // method blocks until its ctx ends
	gate      chan struct{}      // non-nil: controller calls wait for it (or ctx)
	started   chan string        // non-nil: receives the method as a call starts
	ctxErrs   []error            // ctx errors seen by blocked calls
	answered  map[string]func()  // method -> run as the call answers (the plugin has done it)
	inFlight  map[string]int     // controller calls in flight per endpoint
	maxFlight map[string]int
	noRecord  bool
}

func newFakeCSI() *fakeCSI {
	return &fakeCSI{script: map[string][]error{}, block: map[string]bool{},
		inFlight: map[string]int{}, maxFlight: map[string]int{}}
}

const (
	mNodeUnpublish = "NodeUnpublishVolume"
	mNodeUnstage   = "NodeUnstageVolume"
	mCtlUnpublish  = "ControllerUnpublishVolume"
)

func (f *fakeCSI) do(ctx context.Context, c csiCall) error {
	f.mu.Lock()
	if !f.noRecord {
		f.calls = append(f.calls, c)
	}
	var err error
	if q := f.script[c.Method]; len(q) > 0 {
		err, f.script[c.Method] = q[0], q[1:]
	}
	block, gate, started, answered := f.block[c.Method], f.gate, f.started, f.answered[c.Method]
	ctl := c.Method == mCtlUnpublish
	if ctl {
		f.inFlight[c.Endpoint]++
		if f.inFlight[c.Endpoint] > f.maxFlight[c.Endpoint] {
			f.maxFlight[c.Endpoint] = f.inFlight[c.Endpoint]
		}
	}
	f.mu.Unlock()
	defer func() {
		if ctl {
			f.mu.Lock()
			f.inFlight[c.Endpoint]--
			f.mu.Unlock()
		}
	}()
	if started != nil {
		started <- c.Method
	}
	if block {
		<-ctx.Done()
		f.mu.Lock()
		f.ctxErrs = append(f.ctxErrs, ctx.Err())
		f.mu.Unlock()
		return ctx.Err()
	}
	if ctl && gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if answered != nil {
		answered()
	}
	return err
}

// NodeStageVolume and NodePublishVolume make fakeCSI a whole node service
// (a connected agent serves both directions); a release never sends
// them, and a test that lists the calls sees one that did.
func (f *fakeCSI) NodeStageVolume(ctx context.Context, ep string, req *csipb.NodeStageVolumeRequest) error {
	return f.do(ctx, csiCall{Method: "NodeStageVolume", Endpoint: ep, VolumeID: req.VolumeId, Path: req.StagingTargetPath})
}

func (f *fakeCSI) NodePublishVolume(ctx context.Context, ep string, req *csipb.NodePublishVolumeRequest) error {
	return f.do(ctx, csiCall{Method: "NodePublishVolume", Endpoint: ep, VolumeID: req.VolumeId, Path: req.TargetPath})
}

func (f *fakeCSI) NodeUnpublishVolume(ctx context.Context, ep string, req *csipb.NodeUnpublishVolumeRequest) error {
	return f.do(ctx, csiCall{Method: mNodeUnpublish, Endpoint: ep, VolumeID: req.VolumeId, Path: req.TargetPath})
}

func (f *fakeCSI) NodeUnstageVolume(ctx context.Context, ep string, req *csipb.NodeUnstageVolumeRequest) error {
	return f.do(ctx, csiCall{Method: mNodeUnstage, Endpoint: ep, VolumeID: req.VolumeId, Path: req.StagingTargetPath})
}

func (f *fakeCSI) ControllerUnpublishVolume(ctx context.Context, ep string, req *csipb.ControllerUnpublishVolumeRequest) error {
	return f.do(ctx, csiCall{Method: mCtlUnpublish, Endpoint: ep, VolumeID: req.VolumeId, NodeID: req.NodeId, Secrets: req.Secrets})
}

func (f *fakeCSI) methods() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, c := range f.calls {
		out = append(out, c.Method)
	}
	return out
}

func (f *fakeCSI) callList() []csiCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]csiCall(nil), f.calls...)
}

func (f *fakeCSI) count(method string) int {
	n := 0
	for _, m := range f.methods() {
		if m == method {
			n++
		}
	}
	return n
}

func (f *fakeCSI) setScript(method string, errs ...error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.script[method] = errs
}

func (f *fakeCSI) setBlock(method string, b bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.block[method] = b
}

// countingMetrics counts passes and releases per volume.
type countingMetrics struct {
	NopMetrics
	mu       sync.Mutex
	assessed map[structs.VolumeRef]int
	released int
	failed   int
	total    int
}

func newCountingMetrics() *countingMetrics {
	return &countingMetrics{assessed: map[structs.VolumeRef]int{}}
}

func (m *countingMetrics) VolumeAssessed(ref structs.VolumeRef) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.assessed[ref]++
	m.total++
}

func (m *countingMetrics) ClaimReleased(structs.VolumeRef, string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.released++
}

func (m *countingMetrics) AttemptFailed(structs.VolumeRef, string, *structs.ClaimError) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.failed++
}

func (m *countingMetrics) get(ref structs.VolumeRef) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.assessed[ref]
}

func (m *countingMetrics) distinct() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.assessed)
}

func (m *countingMetrics) releasedCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.released
}

// fixture is a store, a CSI fake, a fake clock and a watcher over them.
type fixture struct {
	store   *fakeStore
	csi     *fakeCSI
	clock   *clockwork.FakeClock
	metrics *countingMetrics
	w       *Watcher
}

const (
	testPlugin = "ebs"
	testNode   = "n1"
	nodeEP     = "unix:///node.sock"
	ctlEP      = "unix:///ctl.sock"
)

func newFixture(t testing.TB, cfg Config, mods Modules) *fixture {
	t.Helper()
	return newLoggedFixture(t, cfg, mods, hclog.New(&hclog.LoggerOptions{Level: hclog.Off}))
}

// newLoggedFixture is newFixture with the watcher logging to logger.
func newLoggedFixture(t testing.TB, cfg Config, mods Modules, logger hclog.Logger) *fixture {
	t.Helper()
	f := &fixture{store: newFakeStore(), csi: newFakeCSI(), clock: clockwork.NewFakeClockAt(t0), metrics: newCountingMetrics()}
	cfg.Clock = f.clock
	cfg.Metrics = f.metrics
	if cfg.Jitter == 0 {
		cfg.Jitter = -1 // exact backoffs in assertions
	}
	f.w = New(cfg, Deps{Feed: f.store, State: f.store, Writer: f.store, Node: f.csi, Controller: f.csi, Modules: mods}, logger)
	f.store.putPlugin(&structs.Plugin{ID: testPlugin, ControllerEndpoint: ctlEP, Provider: "ebs.csi.aws.com",
		Capabilities: structs.ControllerCapabilities{PublishUnpublish: true}})
	f.store.putNode(readyNode(testNode))
	t.Cleanup(func() { f.w.SetEnabled(false) })
	return f
}

func readyNode(id string) *structs.Node {
	return &structs.Node{ID: id, Status: structs.NodeReady, LastSeen: t0, Plugins: map[string]*structs.NodePlugin{
		testPlugin: {PluginID: testPlugin, Endpoint: nodeEP, ExternalNodeID: "ext-" + id, StageUnstage: true},
	}}
}

func ref(id string) structs.VolumeRef { return structs.VolumeRef{Namespace: "default", ID: id} }

// newClaim is a published claim (staged and node-published) in state.
func newClaim(alloc, node string, state structs.ClaimState) *structs.Claim {
	return &structs.Claim{AllocID: alloc, NodeID: node, Mode: structs.ClaimWrite,
		AccessMode: structs.AccessSingleNodeWriter, AttachmentMode: structs.AttachFilesystem,
		State: state, ExternalNodeID: "ext-" + node,
		StagingPath: "/stage/" + node, TargetPath: "/target/" + alloc, CreateTime: t0}
}

func newVolume(id string, claims ...*structs.Claim) *structs.Volume {
	v := &structs.Volume{Namespace: "default", ID: id, ExternalID: "vol-" + id, PluginID: testPlugin,
		AccessMode: structs.AccessMultiNodeMultiWrite, AttachmentMode: structs.AttachFilesystem,
		Secrets: map[string]string{"token": "s3cret"}, Claims: map[string]*structs.Claim{}}
	for _, c := range claims {
		v.Claims[c.AllocID] = c
	}
	return v
}

// idleWorkers reports whether no worker goroutine runs and nothing is queued.
func (w *Watcher) idle() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.workers != 0 || w.pending.len() != 0 {
		return false
	}
	for _, st := range w.vols {
		if st.running || st.queued {
			return false
		}
	}
	return true
}

func (w *Watcher) trackedVolumes() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.vols)
}

func fmtCalls(calls []csiCall) string {
	s := ""
	for _, c := range calls {
		s += fmt.Sprintf("%s(%s,%s) ", c.Method, c.VolumeID, c.NodeID)
	}
	return s
}

// settled: no pass queued or running and the blocking query caught up
// with every write, so no pass starts until the test writes or moves the
// clock. A pass's own writes come back through the query as changes and
// queue the volume again, so idle alone can be seen between the pass and
// that second one (TestReassessRejudgesAtOnce swapped its policy there,
// and the second pass released a volume the test said no one would
// judge again). Idle is read again last: a pass the query queued after
// the first read has run or shows.
func (f *fixture) settled() bool {
	if !f.w.idle() {
		return false
	}
	return f.w.feedIndex.Load() >= f.storeIndex() && f.w.idle()
}

// enable turns the watcher on and waits until its blocking query has caught
// up with the store, so later writes are seen as changes.
func (f *fixture) enable(t testing.TB) {
	t.Helper()
	idx := f.storeIndex()
	f.w.SetEnabled(true)
	testutil.WaitFor(t, "watcher caught up with the store", func() bool { return f.w.feedIndex.Load() >= idx })
}

// storeIndex is the fake store's index: its last write.
func (f *fixture) storeIndex() uint64 {
	f.store.mu.RLock()
	defer f.store.mu.RUnlock()
	return f.store.index
}

// setFailWrites makes the fake store refuse every write with err (nil: accept).
func (f *fixture) setFailWrites(err error) {
	f.store.mu.Lock()
	f.store.failWrites = err
	f.store.mu.Unlock()
}
