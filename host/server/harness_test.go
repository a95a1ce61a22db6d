package server

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jonboulle/clockwork"

	"github.com/volhost/volhost/abi"
	"github.com/volhost/volhost/host/cluster"
	"github.com/volhost/volhost/host/csi"
	"github.com/volhost/volhost/host/csi/csitest"
	"github.com/volhost/volhost/host/state"
	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/watcher"
	"github.com/volhost/volhost/watcher/attach"
)

// harness is the whole claim machinery of one server over real parts: a
// dev raft cluster and its FSM, the state store, the claim path, the
// watcher with term fencing, the CSI client and scripted CSI plugins (one
// controller, one node service per node) over gRPC on unix sockets. Only
// passes the test asks for run (the watcher's own loop sees no changes and
// its timers never fire), so a sequence of operations is reproducible.
type harness struct {
	t       testing.TB
	ctx     context.Context
	store   *state.Store
	cluster *cluster.Cluster
	srv     *Server
	w       *watcher.Watcher
	clock   *manualClock
	mods    *switchModules
	ctl     *csitest.Server
	nodes   map[string]*csitest.Server // by node ID
	// oracle is the storage and the machines behind the plugins: node
	// n's plugin runs on machine machineOf(n) and answers external node
	// ID "ext-"+n. It judges the tests by what is really staged,
	// published and attached.
	oracle *csitest.Oracle
	// agents are the node agents connected to this server (nodes
	// registered with RegisterAgentNode).
	agents *agentLinks

	// onCall, when set, sees every CSI call of every plugin as it arrives
	// (the server's OnCall); the invariant checker and the interleaving
	// operations hook in here.
	mu     sync.Mutex
	onCall func(plugin string, c csitest.Call)
}

const (
	testPlugin = "csitest"
	rootDir    = "/var/lib/volhost-test"
)

func newHarness(t testing.TB, nodeIDs ...string) *harness {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	h := &harness{t: t, ctx: ctx, clock: &manualClock{FakeClock: clockwork.NewFakeClockAt(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))},
		mods: &switchModules{}, nodes: map[string]*csitest.Server{}, oracle: csitest.NewOracle()}
	h.store = state.NewStore()
	c, err := cluster.New(cluster.Config{Dev: true, NodeID: "s1", Logger: hclog.NewNullLogger()}, h.store)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Shutdown() })
	h.cluster = c
	if err := c.WaitForLeader(ctx); err != nil {
		t.Fatal(err)
	}
	client := csi.New(csi.Config{CallTimeout: 10 * time.Second})
	t.Cleanup(func() { client.Close() })
	hook := func(plugin string) func(csitest.Call) {
		return func(call csitest.Call) {
			h.mu.Lock()
			f := h.onCall
			h.mu.Unlock()
			if f != nil {
				f(plugin, call)
			}
		}
	}
	h.ctl = csitest.NewServer(t, csitest.Options{PublishUnpublish: true, OnCall: hook("controller"), Oracle: h.oracle})
	for _, id := range nodeIDs {
		h.nodes[id] = csitest.NewServer(t, csitest.Options{NodeID: "ext-" + id, StageUnstage: true, OnCall: hook(id),
			Oracle: h.oracle, Machine: machineOf(id)})
	}
	locks := attach.NewVolumeLocks()
	h.agents = &agentLinks{client: client, up: map[string]bool{}}
	h.srv = New(Config{Store: h.store, Log: c, CSI: client, Modules: h.mods, Clock: h.clock, Locks: locks, Agents: h.agents})
	h.w = watcher.New(watcher.Config{
		Clock: h.clock, Jitter: -1, BackoffBase: time.Second, BackoffMax: 8 * time.Second,
		StuckAfter: time.Minute, CSITimeout: 10 * time.Second, GCInterval: 24 * time.Hour,
	}, watcher.Deps{
		Feed: idleFeed{}, State: onlyAsked{h.store.Reader()}, Writer: c.ClaimWriter(),
		Node: client, Controller: client, Modules: h.mods, Leadership: c, Locks: locks, Agents: h.agents,
	}, nil)
	h.srv.SetReleaser(h.w)
	h.w.SetEnabled(true)
	t.Cleanup(func() { h.w.SetEnabled(false) })

	if _, err := h.srv.RegisterPlugin(ctx, &structs.Plugin{ID: testPlugin, ControllerEndpoint: h.ctl.Endpoint()}); err != nil {
		t.Fatal(err)
	}
	for id, n := range h.nodes {
		if _, err := h.srv.RegisterNode(ctx, &structs.Node{ID: id, RootDir: rootDir,
			Plugins: map[string]*structs.NodePlugin{testPlugin: {Endpoint: n.Endpoint()}}}); err != nil {
			t.Fatal(err)
		}
	}
	return h
}

// machineOf names the machine of the harness's node id's plugin.
func machineOf(nodeID string) string { return "machine-" + nodeID }

// agentLinks stands for the node agents' connections: a connected node's
// steps go to the plugin endpoint its agent registered, on its machine, as
// the agent would run them against its node-local socket.
type agentLinks struct {
	client *csi.Client
	mu     sync.Mutex
	up     map[string]bool // node ID -> its agent is connected
}

func (a *agentLinks) connect(nodeID string, up bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.up[nodeID] = up
}

func (a *agentLinks) connected(nodeID string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.up[nodeID]
}

func (a *agentLinks) NodeAgent(nodeID string) (attach.NodeSteps, bool) {
	if !a.connected(nodeID) {
		return nil, false
	}
	return a.client, true
}

// hello is node id's agent connecting with its report: the plugin endpoint
// of machine's node service, answering ext as its external node ID, and
// root_dir root.
func (h *harness) hello(id, endpoint, ext, root string) (*structs.Node, error) {
	n, err := h.srv.RegisterAgentNode(h.ctx, &structs.Node{ID: id, RootDir: root, Plugins: map[string]*structs.NodePlugin{
		testPlugin: {Endpoint: endpoint, ExternalNodeID: ext, StageUnstage: true}}})
	if err == nil {
		h.agents.connect(id, true)
	}
	return n, err
}

func (h *harness) setOnCall(f func(plugin string, c csitest.Call)) {
	h.mu.Lock()
	h.onCall = f
	h.mu.Unlock()
}

// volume registers a volume of the test plugin whose external ID is
// "disk-"+ns+"-"+id.
func (h *harness) volume(ns, id string, mode structs.AccessMode) structs.VolumeRef {
	h.t.Helper()
	_, err := h.srv.RegisterVolumes(h.ctx, []*structs.Volume{{Namespace: ns, ID: id, ExternalID: externalID(ns, id),
		PluginID: testPlugin, AccessMode: mode, AttachmentMode: structs.AttachFilesystem}})
	if err != nil {
		h.t.Fatal(err)
	}
	return structs.VolumeRef{Namespace: ns, ID: id}
}

func externalID(ns, id string) string { return "disk-" + ns + "-" + id }

// alloc registers (or updates) an allocation.
func (h *harness) alloc(ns, id, node string, status structs.AllocClientStatus) error {
	_, err := h.srv.UpsertAllocs(h.ctx, []*structs.Alloc{{ID: id, Namespace: ns, NodeID: node, ClientStatus: status}})
	return err
}

func (h *harness) mustAlloc(ns, id, node string, status structs.AllocClientStatus) {
	h.t.Helper()
	if err := h.alloc(ns, id, node, status); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) claim(ref structs.VolumeRef, alloc, node string, mode structs.ClaimMode) error {
	_, err := h.srv.ClaimVolume(h.ctx, &structs.ClaimRequest{Namespace: ref.Namespace, VolumeID: ref.ID,
		AllocID: alloc, NodeID: node, Mode: mode})
	return err
}

// restartServer replaces the harness's server with a new one writing
// through log, over the same store, plugins, locks and watcher: a server
// started anew (nothing of the old one's memory), or one of another
// release.
func (h *harness) restartServer(log Log) {
	h.srv = New(Config{Store: h.store, Log: log, CSI: h.srv.csi, Modules: h.mods, Clock: h.clock,
		Locks: h.srv.locks, Agents: h.agents})
	h.srv.SetReleaser(h.w)
}

// liveClaim gives running allocation alloc a write claim on ref on node,
// failing the test if it is refused.
func (h *harness) liveClaim(ref structs.VolumeRef, alloc, node string) {
	h.t.Helper()
	h.mustAlloc(ref.Namespace, alloc, node, structs.AllocRunning)
	if err := h.claim(ref, alloc, node, structs.ClaimWrite); err != nil {
		h.t.Fatal(err)
	}
}

// endedClaim gives alloc a write claim on ref on node, then ends the
// allocation: a claim ready to be released.
func (h *harness) endedClaim(ref structs.VolumeRef, alloc, node string) {
	h.t.Helper()
	h.liveClaim(ref, alloc, node)
	h.mustAlloc(ref.Namespace, alloc, node, structs.AllocComplete)
}

func (h *harness) vol(ref structs.VolumeRef) *structs.Volume {
	h.t.Helper()
	v, err := h.store.Snapshot().VolumeByID(nil, ref.Namespace, ref.ID)
	if err != nil {
		h.t.Fatal(err)
	}
	return v
}

// calls lists the calls of method on plugin ("controller" or a node ID)
// for volume ref.
func (h *harness) calls(plugin, method string, ref structs.VolumeRef) []csitest.Call {
	s := h.ctl
	if plugin != "controller" {
		s = h.nodes[plugin]
	}
	var out []csitest.Call
	for _, c := range s.Calls(method) {
		if c.VolumeID == externalID(ref.Namespace, ref.ID) {
			out = append(out, c)
		}
	}
	return out
}

// manualClock is a fake clock whose AfterFunc timers never fire: the
// watcher's wake-ups are the test's Assess calls, so nothing runs in the
// background and a seed replays the same way.
type manualClock struct{ *clockwork.FakeClock }

func (manualClock) AfterFunc(time.Duration, func()) clockwork.Timer { return deadTimer{} }

type deadTimer struct{}

func (deadTimer) Chan() <-chan time.Time   { return nil }
func (deadTimer) Reset(time.Duration) bool { return false }
func (deadTimer) Stop() bool               { return true }

// idleFeed never reports a change: passes run only when the test asks.
type idleFeed struct{}

func (idleFeed) VolumesChangedSince(ctx context.Context, _ uint64) ([]*structs.Volume, uint64, error) {
	<-ctx.Done()
	return nil, 0, ctx.Err()
}

// onlyAsked hides the releasable volumes from the step-up assessment.
type onlyAsked struct{ state.Reader }

func (onlyAsked) ReleasableVolumes() ([]structs.VolumeRef, error) { return nil, nil }

// switchModules serves the native policy and adapter unless a test put a
// hostile one in place for a namespace.
type switchModules struct {
	mu       sync.Mutex
	policies map[string]watcher.Policy
	adapters map[string]attach.Adapter
}

func (m *switchModules) set(ns string, p watcher.Policy, a attach.Adapter) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.policies == nil {
		m.policies, m.adapters = map[string]watcher.Policy{}, map[string]attach.Adapter{}
	}
	m.policies[ns], m.adapters[ns] = p, a
}

func (m *switchModules) PolicyFor(v *structs.Volume) watcher.Policy {
	m.mu.Lock()
	defer m.mu.Unlock()
	if p := m.policies[v.Namespace]; p != nil {
		return p
	}
	return watcher.DefaultPolicy{}
}

func (m *switchModules) AdapterFor(v *structs.Volume) attach.Adapter {
	m.mu.Lock()
	defer m.mu.Unlock()
	if a := m.adapters[v.Namespace]; a != nil {
		return a
	}
	return watcher.SpecAdapter{}
}

// Hostile modules: each breaks one rule the host must enforce (module
// answers are bounded by what the host can verify). They are named so a failing sequence reads.
type (
	// releaseEverything releases every claim, live or not, optionally
	// skipping the node step.
	releaseEverything struct{ skipNode bool }
	// waitForever holds every claim with an overflowing retry_after.
	waitForever struct{}
	// lyingAdapter names another disk or another instance, or calls every
	// driver error done.
	lyingAdapter struct {
		volumeID, nodeID string
		allDone          bool
	}
)

func (p releaseEverything) DecideRelease(_ context.Context, req *abi.PolicyRequest) (*abi.PolicyResponse, error) {
	action := abi.ActionRelease
	if p.skipNode {
		action = abi.ActionReleaseSkipNode
	}
	resp := &abi.PolicyResponse{}
	for _, c := range req.Claims {
		resp.Decisions = append(resp.Decisions, abi.Decision{AllocID: c.AllocID, Action: action, Reason: "hostile"})
	}
	return resp, nil
}

func (waitForever) DecideRelease(_ context.Context, req *abi.PolicyRequest) (*abi.PolicyResponse, error) {
	resp := &abi.PolicyResponse{}
	for _, c := range req.Claims {
		resp.Decisions = append(resp.Decisions, abi.Decision{AllocID: c.AllocID, Action: abi.ActionWait,
			RetryAfterMs: 9223372036855, Reason: "never"})
	}
	return resp, nil
}

func (a lyingAdapter) AdaptRequest(ctx context.Context, req *abi.AdapterRequest) (*abi.AdapterResponse, error) {
	resp, err := watcher.SpecAdapter{}.AdaptRequest(ctx, req)
	if err != nil {
		return nil, err
	}
	if a.volumeID != "" {
		resp.VolumeID = a.volumeID
	}
	if a.nodeID != "" {
		resp.NodeID = a.nodeID
	}
	return resp, nil
}

func (a lyingAdapter) ClassifyError(ctx context.Context, req *abi.ClassifyRequest) (*abi.ClassifyResponse, error) {
	if a.allDone {
		return &abi.ClassifyResponse{Outcome: abi.OutcomeDone, Reason: "hostile: everything is fine"}, nil
	}
	return watcher.SpecAdapter{}.ClassifyError(ctx, req)
}

func (p releaseEverything) String() string {
	if p.skipNode {
		return "release-skip-node-everything"
	}
	return "release-everything"
}
func (waitForever) String() string { return "wait-forever" }
func (a lyingAdapter) String() string {
	var parts []string
	if a.volumeID != "" {
		parts = append(parts, "volume="+a.volumeID)
	}
	if a.nodeID != "" {
		parts = append(parts, "node="+a.nodeID)
	}
	if a.allDone {
		parts = append(parts, "all-done")
	}
	return fmt.Sprintf("lying-adapter(%s)", strings.Join(parts, ","))
}
