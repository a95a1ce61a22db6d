package server

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/volhost/volhost/host/csi/csitest"
	"github.com/volhost/volhost/host/state"
	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/internal/testutil"
	"github.com/volhost/volhost/watcher"
	"github.com/volhost/volhost/watcher/attach"
)

// TestClaimModel is the model-based test of the claim and release
// machinery (RATIONALE.md "Safety"): random sequences of claims, allocation
// updates, release passes, operator detaches, CSI failures, calls that run
// and lose their answer, hostile module answers, node status changes,
// leader step-down/step-up, and node identity changes (a node agent's hello
// with a changed, duplicated or swapped external node ID or another
// root_dir, an agent dropping and reconnecting, one machine registered
// under two node IDs, a node losing and regaining its plugin endpoint), run
// over the real state store, raft FSM, claim path, watcher and CSI client
// against scripted plugins. The judge is the plugins' Oracle, the real
// state of the machines and the storage, never volhost's own view:
//
//   - no call breaks a precondition the CSI spec puts on the CO (NodePublish
//     after its NodeStage, NodeUnstage after every NodeUnpublish,
//     ControllerUnpublish after every node step on that machine, node steps
//     after ControllerPublish to that machine, one staging path per volume
//     per machine, a single-node volume on one node), checked as each call
//     arrives;
//   - after every operation, each running allocation's volume is attached
//     to the machine it runs on, published at its target there and staged
//     at the path that target came from;
//   - no claim of a live allocation is lost;
//   - once every allocation ends and the faults stop, every claim is
//     released and nothing of the run's volumes is left staged, published
//     or attached on any machine, except what the host reported as a
//     leftover (or a refused claim's rollback was told failed, which the
//     host logs);
//   - a registration the host refuses changes nothing.
//
// VOLHOST_MODEL_SEEDS sets the number of seeds (default 200; `make chaos`
// runs many more) and VOLHOST_MODEL_SEED runs one. A failing seed is
// shrunk to a minimal sequence, which the failure prints.
func TestClaimModel(t *testing.T) {
	seeds := testutil.EnvInt(t, "VOLHOST_MODEL_SEEDS", 200, 0)
	first := 1
	if one := os.Getenv("VOLHOST_MODEL_SEED"); one != "" {
		first, seeds = testutil.EnvInt(t, "VOLHOST_MODEL_SEED", 0, 0), 1
	}
	h := newHarness(t, modelNodes...)
	var total stats
	checks := h.oracle.Checks()
	defer func() {
		t.Logf("%d operations: %d claims accepted (%d during a release), %d refused, %d released, %d NodeUnpublish (each once), %d NodeUnstage, %d ControllerUnpublish; %d lost answers scripted, %d step-downs mid-call, %d registrations (%d refused); %d CSI spec checks by the oracle, %d excused leaks",
			total.ops, total.claims, total.interleaved, total.refused, total.released, total.nodeUnpublishes, total.unstages, total.unpublishes,
			total.lost, total.stepdowns, total.registrations, total.regRefused, h.oracle.Checks()-checks, total.excused)
	}()
	without := map[string]bool{}
	for _, k := range strings.Split(os.Getenv("VOLHOST_MODEL_WITHOUT"), ",") {
		without[strings.TrimSpace(k)] = true
	}
	// VOLHOST_MODEL_FAILURES=N reports up to N failing seeds, each
	// shrunk, before stopping (default 1): how many seeds each defect
	// takes to find.
	report, failed, ran := testutil.EnvInt(t, "VOLHOST_MODEL_FAILURES", 1, 0), 0, 0
	defer func() { t.Logf("%d seeds run, %d failed", ran, failed) }()
	for seed := first; seed < first+seeds && failed < max(report, 1); seed++ {
		ran++
		ops := genOps(rand.New(rand.NewPCG(uint64(seed), 0x5eed)), modelOps, without)
		violation := runModel(h, fmt.Sprintf("s%d", seed), ops, &total)
		if violation == "" {
			continue
		}
		failed++
		minimal, why := shrink(h, seed, ops, violation)
		var b strings.Builder
		for i, op := range minimal {
			fmt.Fprintf(&b, "\n  %2d. %s", i+1, op)
		}
		t.Errorf("seed %d (VOLHOST_MODEL_SEED=%d, failure %d after %d seeds): %s\nminimal sequence (%d of %d operations):%s",
			seed, seed, failed, ran, why, len(minimal), len(ops), b.String())
	}
}

// modelOps is the length of a generated sequence.
const modelOps = 40

// modelNodes are the nodes a run starts with, each on its own machine;
// aliasNode is registered by an "alias" operation on node1's machine, with
// node1's plugin endpoint: one machine under two node IDs.
var modelNodes = []string{"node1", "node2"}

const (
	aliasNode = "node1b"
	altRoot   = "/var/lib/volhost-test-b"
)

// nodeMachine is the harness node whose plugin (and machine,
// machineOf(nodeMachine(id))) node id reaches.
func nodeMachine(id string) string {
	if id == aliasNode {
		return "node1"
	}
	return id
}

// op is one step of a sequence. Volumes are "v0" (multi-node-multi-writer)
// and "v1" (single-node-writer); allocations are numbered in the order the
// sequence creates them.
type op struct {
	kind   string
	vol    string
	alloc  int
	node   string
	mode   structs.ClaimMode
	status structs.AllocClientStatus
	plugin string // "controller" or a node
	method string
	code   codes.Code
	module string
	secs   int
	ext    string // hello: "own", "new" (an ID no machine answers), "other" (the other machine's)
	root   string // hello, reregister: root_dir ("" = the harness's)
}

func (o op) String() string {
	switch o.kind {
	case "claim", "claim-during-release":
		return fmt.Sprintf("%s %s alloc%d on %s (%s)", o.kind, o.vol, o.alloc, o.node, o.mode)
	case "end":
		return fmt.Sprintf("alloc%d -> %s", o.alloc, o.status)
	case "pass":
		return "release pass over " + o.vol
	case "detach":
		return fmt.Sprintf("volume detach %s %s", o.vol, o.node)
	case "fail":
		return fmt.Sprintf("next %s on %s answers %s", o.method, o.plugin, o.code)
	case "module":
		return "modules: " + o.module
	case "node":
		return fmt.Sprintf("node %s -> %s", o.node, o.status)
	case "flap":
		return "leader step-down and step-up (watcher disabled, enabled)"
	case "stepdown":
		return fmt.Sprintf("release pass over %s; the leader steps down while its first NodeUnpublish, NodeUnstage or ControllerUnpublish runs, which the driver finishes after the next operation", o.vol)
	case "advance":
		return fmt.Sprintf("clock +%ds", o.secs)
	case "lose":
		return fmt.Sprintf("next %s on %s runs and its answer is lost (%s)", o.method, o.plugin, o.code)
	case "hello":
		what := map[string]string{"own": "its own", "new": "a new (instance replaced)", "other": "the other machine's"}[o.ext]
		return fmt.Sprintf("node %s's agent (re)connects: hello with %s external node ID, root_dir %s", o.node, what, rootName(o.root))
	case "swap":
		return "node1's and node2's agents say hello with each other's external node ID"
	case "drop":
		return fmt.Sprintf("node %s's agent disconnects", o.node)
	case "alias":
		return fmt.Sprintf("node %s registered with node1's plugin endpoint and root_dir (one machine, two node IDs)", aliasNode)
	case "endpoint-off":
		return fmt.Sprintf("node %s's agent says hello without its plugin endpoint (external node ID kept)", o.node)
	case "endpoint-on":
		return fmt.Sprintf("node %s's agent says hello with its plugin endpoint again", o.node)
	case "root":
		return fmt.Sprintf("node %s re-registers directly with root_dir %s", o.node, rootName(o.root))
	}
	return o.kind
}

func rootName(r string) string {
	if r == "" {
		return rootDir
	}
	return r
}

var hostileModules = []string{"honest", "release-everything", "release-skip-node-everything", "wait-forever",
	"lying-volume", "lying-node", "all-done"}

func moduleFor(name string) (watcher.Policy, attach.Adapter) {
	switch name {
	case "release-everything":
		return releaseEverything{}, nil
	case "release-skip-node-everything":
		return releaseEverything{skipNode: true}, nil
	case "wait-forever":
		return waitForever{}, nil
	case "lying-volume":
		return nil, lyingAdapter{volumeID: "disk-of-someone-else"}
	case "lying-node":
		return nil, lyingAdapter{nodeID: "projects/p/zones/z/instances/evil"}
	case "all-done":
		return nil, lyingAdapter{allDone: true}
	}
	return nil, nil
}

// genOps draws a sequence; claims are frequent enough that most sequences
// have several live claims on one node when the releases run.
//
// Operations of the kinds in without are not drawn (VOLHOST_MODEL_WITHOUT,
// a comma-separated list of kinds or kind:method, e.g.
// "alias,lose:NodeStageVolume": to see which defect the rest finds).
func genOps(r *rand.Rand, n int, without map[string]bool) []op {
	vols := []string{"v0", "v1"}
	var ops []op
	allocs := 0
	nodes := modelNodes
	pick := func(s []string) string { return s[r.IntN(len(s))] }
	pickPlugin := func() (string, string) {
		plugin := pick(append([]string{"controller", "controller"}, modelNodes...))
		methods := []string{csitest.NodeUnpublish, csitest.NodeUnstage, csitest.NodePublish, csitest.NodeStage}
		if plugin == "controller" {
			methods = []string{csitest.ControllerUnpublish, csitest.ControllerPublish}
		}
		return plugin, pick(methods)
	}
	for len(ops) < n {
		switch k := r.IntN(100); {
		case k < 18:
			allocs++
			mode := structs.ClaimWrite
			if r.IntN(3) == 0 {
				mode = structs.ClaimRead
			}
			ops = append(ops, op{kind: "claim", vol: pick(vols), alloc: allocs, node: pick(nodes), mode: mode})
		case k < 24 && allocs > 0:
			allocs++
			ops = append(ops, op{kind: "claim-during-release", vol: pick(vols), alloc: allocs, node: pick(nodes), mode: structs.ClaimWrite})
		case k < 36 && allocs > 0:
			st := []structs.AllocClientStatus{structs.AllocComplete, structs.AllocFailed, structs.AllocLost}[r.IntN(3)]
			ops = append(ops, op{kind: "end", alloc: 1 + r.IntN(allocs), status: st})
		case k < 45:
			ops = append(ops, op{kind: "pass", vol: pick(vols)})
		case k < 51:
			ops = append(ops, op{kind: "stepdown", vol: pick(vols)})
		case k < 54:
			ops = append(ops, op{kind: "detach", vol: pick(vols), node: pick(nodes)})
		case k < 60:
			plugin, method := pickPlugin()
			code := []codes.Code{codes.Unavailable, codes.Internal, codes.NotFound, codes.Aborted, codes.InvalidArgument}[r.IntN(5)]
			ops = append(ops, op{kind: "fail", plugin: plugin, method: method, code: code})
		case k < 68:
			plugin, method := pickPlugin()
			code := []codes.Code{codes.Unavailable, codes.DeadlineExceeded}[r.IntN(2)]
			ops = append(ops, op{kind: "lose", plugin: plugin, method: method, code: code})
		case k < 73:
			ops = append(ops, op{kind: "module", module: hostileModules[r.IntN(len(hostileModules))]})
		case k < 76:
			st := structs.AllocClientStatus(structs.NodeReady)
			if r.IntN(2) == 0 {
				st = structs.AllocClientStatus(structs.NodeDown)
			}
			ops = append(ops, op{kind: "node", node: pick(nodes), status: st})
		case k < 79:
			ops = append(ops, op{kind: "flap"})
		case k < 83:
			ops = append(ops, op{kind: "advance", secs: 1 + r.IntN(90)})
		case k < 89:
			o := op{kind: "hello", node: pick(nodes), ext: pick([]string{"own", "own", "new", "other"})}
			if r.IntN(4) == 0 {
				o.root = altRoot
			}
			ops = append(ops, o)
		case k < 91:
			ops = append(ops, op{kind: "drop", node: pick(nodes)})
		case k < 92:
			ops = append(ops, op{kind: "swap"})
		case k < 94:
			ops = append(ops, op{kind: "alias"})
			if len(nodes) == len(modelNodes) && !without["alias"] {
				nodes = append(append([]string{}, modelNodes...), aliasNode)
			}
		case k < 97:
			ops = append(ops, op{kind: "endpoint-off", node: pick(nodes)})
		case k < 99:
			ops = append(ops, op{kind: "endpoint-on", node: pick(nodes)})
		default:
			ops = append(ops, op{kind: "root", node: pick(nodes), root: altRoot})
		}
		if last := ops[len(ops)-1]; without[last.kind] || without[last.kind+":"+last.method] {
			ops = ops[:len(ops)-1]
		}
	}
	return ops
}

// model is what one run knows: the claims the host accepted, where each
// allocation runs, state a refused claim's failed rollback may have left
// (the host logs those) and the first violation.
type model struct {
	h     *harness
	stats *stats
	// mu guards the fields below for brief moments, never across a call:
	// the CSI plugins' OnCall hooks run on gRPC server goroutines, which
	// the race detector cannot see synchronised with the test's through
	// the socket.
	mu      sync.Mutex
	ns      string
	refs    map[string]structs.VolumeRef // "v0" -> ref
	byExt   map[string]structs.VolumeRef // external ID -> ref
	claimed map[string]structs.VolumeRef // alloc ID -> volume it holds a claim on
	machine map[string]string            // alloc ID -> the machine it runs on
	allocs  map[string]string            // alloc ID -> node, every allocation of the run
	leaked  map[[2]string]bool           // (external volume ID, machine) a refused claim's failed rollback may have left
	aliased bool                         // aliasNode is registered
	// lied marks the nodes whose agent said hello with another machine's
	// external node ID: the host cannot know it is not the node's own, so
	// what follows from it on that node's own machine is not judged (a
	// publish aimed at the ID it was told); what it does to another
	// machine, or leaves behind, is. (An agent reporting a new ID after
	// its instance was replaced does not lie: its plugin answers it.)
	lied      map[string]bool
	liedClaim map[string]bool // alloc ID -> claimed while its node was lied about
	// liedPairs are the (external volume ID, external node ID) a claim
	// made while its node was lied about recorded: the host attaches
	// there because it was told to, and when that ID is another
	// machine's (one it answered before its instance was replaced, which
	// no node reports any more) the attachment and its release act on
	// that machine. The host has no record that could say so
	// (RELIABILITY "What the host cannot know").
	liedPairs map[[2]string]bool
	// rolledBack are the targets a refused claim's rollback unpublished
	// before an undo after it failed: the claim's publishing record does
	// not say the target is gone, so its release sends NodeUnpublish
	// again (idempotent), which is not the repeat checkUnpublishedOnce
	// forbids.
	rolledBack map[string]bool
	seen       int // oracle violations already judged
	// down marks the machines one of whose nodes was reported down: a
	// release may then skip the node steps of its ended allocations (the
	// operator said the machine is off), leaving what they published.
	down      map[string]bool
	violation string
	// slow is a destructive call a leader that stepped down left running
	// on the driver ("stepdown"), finished after the next operation.
	slow *slowCall
}

// slowCall is a blocked CSI call whose effect applies once block closes.
type slowCall struct {
	srv   *csitest.Server
	seq   int // the call's csitest.Call.Seq
	block chan struct{}
}

func (m *model) allocID(n int) string { return fmt.Sprintf("%s-alloc%d", m.ns, n) }

func (m *model) violate(format string, args ...any) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.violateLocked(format, args...)
}

func (m *model) violateLocked(format string, args ...any) {
	if m.violation == "" {
		m.violation = fmt.Sprintf(format, args...)
	}
}

func (m *model) violated() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.violation
}

func (m *model) count(f func(*stats)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f(m.stats)
}

// stats say what the runs exercised, so a generator that stopped making
// interesting sequences shows.
type stats struct {
	ops, claims, interleaved, refused, released, unstages, unpublishes, nodeUnpublishes int
	lost, registrations, regRefused, excused                                            int
	stepdowns                                                                           int // step-downs that left a destructive call running
}

// runModel runs ops in namespace ns and returns the first violation, or "".
func runModel(h *harness, ns string, ops []op, st *stats) string {
	if st == nil {
		st = &stats{}
	}
	m := &model{h: h, ns: ns, stats: st, refs: map[string]structs.VolumeRef{}, byExt: map[string]structs.VolumeRef{},
		claimed: map[string]structs.VolumeRef{}, machine: map[string]string{}, allocs: map[string]string{},
		leaked: map[[2]string]bool{}, lied: map[string]bool{}, down: map[string]bool{}, liedClaim: map[string]bool{},
		liedPairs: map[[2]string]bool{}, rolledBack: map[string]bool{}, seen: len(h.oracle.Violations())}
	m.refs["v0"] = h.volume(ns, "v0", structs.AccessMultiNodeMultiWrite)
	m.refs["v1"] = h.volume(ns, "v1", structs.AccessSingleNodeWriter)
	for _, ref := range m.refs {
		m.byExt[externalID(ref.Namespace, ref.ID)] = ref
	}
	h.setOnCall(m.checkCall)
	defer m.reset()
	for _, o := range ops {
		st.ops++
		pending := m.slow
		m.do(o)
		m.finishSlow(pending)
		m.checkState(o)
		if v := m.violated(); v != "" {
			return v
		}
	}
	m.finishSlow(m.slow)
	m.checkState(op{kind: "the driver finishes the last slow call"})
	if v := m.violated(); v != "" {
		return v
	}
	m.drain()
	m.checkUnpublishedOnce()
	m.checkNothingLeft()
	return m.violated()
}

// checkUnpublishedOnce: once NodeUnpublish of a target path succeeded, a
// failed NodeUnstage of the volume on that node does not make the leader
// send the NodeUnpublish again (the retry of a failed unstage once
// repeated the unpublish; the NodeUnpublished mark prevents it). A repeat
// after a pass was cancelled mid-call is not counted: the plugin may have
// answered OK to a caller that had gone, and the leader cannot know.
func (m *model) checkUnpublishedOnce() {
	for _, node := range modelNodes {
		published := map[string]bool{}
		lastTarget := map[string]string{}  // volume ID -> target last unpublished
		unstageFailed := map[string]bool{} // volume ID -> a NodeUnstage failed since
		for _, c := range m.h.nodes[node].AllCalls() {
			if _, ours := m.byExt[c.VolumeID]; !ours || !c.Done {
				continue
			}
			if c.Method == csitest.NodeUnstage && c.Code != codes.OK {
				unstageFailed[c.VolumeID] = true
			}
			if c.Code != codes.OK {
				continue
			}
			switch c.Method {
			case csitest.NodePublish:
				published[c.TargetPath] = true
			case csitest.NodeUnpublish:
				if !published[c.TargetPath] && lastTarget[c.VolumeID] == c.TargetPath && unstageFailed[c.VolumeID] && !m.rolledBackTarget(c.TargetPath) {
					m.violate("NodeUnpublish of %s on %s was sent again after a failed NodeUnstage, with no NodePublish since", c.TargetPath, node)
					return
				}
				published[c.TargetPath] = false
				lastTarget[c.VolumeID], unstageFailed[c.VolumeID] = c.TargetPath, false
				m.count(func(s *stats) { s.nodeUnpublishes++ })
			}
		}
	}
}

func (m *model) rolledBackTarget(target string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.rolledBack[target]
}

// reset leaves the shared harness as the next run expects it: every
// allocation of the run ended and its volumes dropped (a run cut short by
// a violation leaves claims, which would pin the nodes' registrations),
// the alias node gone, every node registered directly again with its own
// plugin endpoint and root_dir, no fault scripted.
func (m *model) reset() {
	h := m.h
	m.finishSlow(m.slow)
	h.setOnCall(nil)
	h.ctl.ClearScripts()
	for _, n := range h.nodes {
		n.ClearScripts()
	}
	h.mods.set(m.ns, nil, nil)
	if !h.w.Enabled() {
		h.w.SetEnabled(true)
	}
	for id, node := range m.allocs {
		_ = h.alloc(m.ns, id, node, structs.AllocComplete)
	}
	for _, ref := range m.refs {
		if _, _, err := h.srv.DeregisterVolume(h.ctx, ref.Namespace, ref.ID, true); err != nil {
			h.t.Fatalf("reset: %v", err)
		}
	}
	if n, _ := h.store.Snapshot().NodeByID(nil, aliasNode); n != nil {
		if _, _, err := h.cluster.Apply(h.ctx, structs.NodeDeregisterType, &structs.NodeDeregisterRequest{NodeID: aliasNode}); err != nil {
			h.t.Fatalf("reset: %v", err)
		}
	}
	// First every node without plugins, so that no registration holds
	// another's external node ID when each takes its own back.
	for _, id := range modelNodes {
		h.nodes[id].SetNodeID("ext-" + id)
		h.agents.connect(id, false)
		if _, err := h.srv.RegisterNode(h.ctx, &structs.Node{ID: id, RootDir: rootDir}); err != nil {
			h.t.Fatalf("reset: %v", err)
		}
	}
	for _, id := range modelNodes {
		if _, err := h.srv.RegisterNode(h.ctx, &structs.Node{ID: id, RootDir: rootDir,
			Plugins: map[string]*structs.NodePlugin{testPlugin: {Endpoint: h.nodes[id].Endpoint()}}}); err != nil {
			h.t.Fatalf("reset: %v", err)
		}
		if _, err := h.srv.UpdateNodeStatus(h.ctx, id, structs.NodeReady); err != nil {
			h.t.Fatal(err)
		}
	}
}

func (m *model) do(o op) {
	h := m.h
	switch o.kind {
	case "claim":
		m.claim(o)
	case "claim-during-release":
		// The claim runs while a pass over the volume is between its
		// NodeUnpublish and its per-node steps (a release racing a new claim).
		ref := m.refs[o.vol]
		var fired atomic.Bool
		h.setOnCall(func(plugin string, c csitest.Call) {
			m.checkCall(plugin, c)
			if plugin == nodeMachine(o.node) && c.Method == csitest.NodeUnpublish && c.VolumeID == externalID(ref.Namespace, ref.ID) &&
				fired.CompareAndSwap(false, true) {
				m.count(func(s *stats) { s.interleaved++ })
				m.claim(o)
			}
		})
		_ = h.w.Assess(h.ctx, ref)
		h.setOnCall(m.checkCall)
		if !fired.Load() {
			m.claim(o) // no release was under way: an ordinary claim
		}
	case "end":
		id := m.allocID(o.alloc)
		a, _ := h.store.Snapshot().AllocByID(nil, id)
		if a != nil {
			_ = h.alloc(m.ns, id, a.NodeID, o.status)
		}
	case "pass":
		_ = h.w.Assess(h.ctx, m.refs[o.vol])
	case "detach":
		ref := m.refs[o.vol]
		_, _ = h.srv.DetachVolume(h.ctx, ref.Namespace, ref.ID, o.node)
	case "fail", "lose":
		s := h.ctl
		if o.plugin != "controller" {
			s = h.nodes[o.plugin]
		}
		r := csitest.Result{Code: o.code}
		if o.kind == "lose" {
			r = csitest.Lost(o.code)
			m.count(func(s *stats) { s.lost++ })
		}
		s.Script(o.method, r)
	case "module":
		p, a := moduleFor(o.module)
		h.mods.set(m.ns, p, a)
	case "node":
		if _, err := h.srv.UpdateNodeStatus(h.ctx, o.node, structs.NodeStatus(o.status)); err == nil && o.status == structs.AllocClientStatus(structs.NodeDown) {
			m.mu.Lock()
			m.down[machineOf(nodeMachine(o.node))] = true
			m.mu.Unlock()
		}
	case "flap":
		h.w.SetEnabled(false)
		h.w.SetEnabled(true)
	case "stepdown":
		m.stepDownMidCall(o)
	case "advance":
		h.clock.Advance(time.Duration(o.secs) * time.Second)
	case "hello":
		// A node agent reports what its plugin answers NodeGetInfo now
		// (after an instance replacement, the new ID): only "other" lies.
		ext := h.nodes[nodeMachine(o.node)].NodeID()
		switch o.ext {
		case "new":
			// The instance was replaced: its plugin answers a new
			// external node ID, which the agent reports.
			ext = "ext-" + nodeMachine(o.node) + "-replaced"
			h.nodes[nodeMachine(o.node)].SetNodeID(ext)
		case "other":
			ext = "ext-node2"
			if nodeMachine(o.node) == "node2" {
				ext = "ext-node1"
			}
		}
		if m.register(o.node, func() error {
			_, err := h.hello(o.node, h.nodes[nodeMachine(o.node)].Endpoint(), ext, rootName(o.root))
			return err
		}) {
			m.setLied(o.node, o.ext == "other")
		}
	case "swap":
		for _, pair := range [][2]string{{"node1", "ext-node2"}, {"node2", "ext-node1"}} {
			if m.register(pair[0], func() error {
				_, err := h.hello(pair[0], h.nodes[pair[0]].Endpoint(), pair[1], rootDir)
				return err
			}) {
				m.setLied(pair[0], true)
			}
		}
	case "drop":
		h.agents.connect(o.node, false)
	case "alias":
		m.register(aliasNode, func() error {
			_, err := h.srv.RegisterNode(h.ctx, &structs.Node{ID: aliasNode, RootDir: rootDir,
				Plugins: map[string]*structs.NodePlugin{testPlugin: {Endpoint: h.nodes["node1"].Endpoint()}}})
			return err
		})
	case "endpoint-off", "endpoint-on":
		// The node's agent says hello with its plugin's external node ID
		// and without, then with, the plugin's endpoint: the plugin's
		// socket went away and came back (a driver restarting).
		// With the socket back, the agent reports what the plugin
		// answers now (a new ID after an instance replacement); without
		// it, the ID it last had.
		ep, root, ext := "", rootDir, h.nodes[nodeMachine(o.node)].NodeID()
		if cur, _ := h.store.Snapshot().NodeByID(nil, o.node); cur != nil {
			if cur.RootDir != "" {
				root = cur.RootDir // losing the endpoint changes nothing else
			}
			if np := cur.Plugins[testPlugin]; o.kind == "endpoint-off" && np != nil && np.ExternalNodeID != "" {
				ext = np.ExternalNodeID
			}
		}
		if o.kind == "endpoint-on" {
			ep = h.nodes[nodeMachine(o.node)].Endpoint()
		}
		if m.register(o.node, func() error {
			_, err := h.hello(o.node, ep, ext, root)
			return err
		}) {
			m.setLied(o.node, false)
		}
	case "root":
		if m.register(o.node, func() error {
			_, err := h.srv.RegisterNode(h.ctx, &structs.Node{ID: o.node, RootDir: o.root,
				Plugins: map[string]*structs.NodePlugin{testPlugin: {Endpoint: h.nodes[nodeMachine(o.node)].Endpoint()}}})
			return err
		}) {
			m.setLied(o.node, false) // probed: the plugin's own answer
		}
	}
}

func (m *model) setLied(node string, lied bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.lied[node] = lied
}

// liedOnLocked: a node registered on machine mach is lied about.
func (m *model) liedOnLocked(mach string) bool {
	for node, lied := range m.lied {
		if lied && machineOf(nodeMachine(node)) == mach {
			return true
		}
	}
	return false
}

// register runs a registration of node id and reports whether it was
// accepted. A refusal (a rule against a duplicate external node ID, or a
// change under live claims) is a valid answer, and must then have changed
// nothing.
func (m *model) register(id string, write func() error) bool {
	h := m.h
	before, _ := h.store.Snapshot().NodeByID(nil, id)
	err := write()
	m.count(func(s *stats) { s.registrations++ })
	if err == nil {
		if id == aliasNode {
			m.mu.Lock()
			m.aliased = true
			m.mu.Unlock()
		}
		return true
	}
	m.count(func(s *stats) { s.regRefused++ })
	after, _ := h.store.Snapshot().NodeByID(nil, id)
	if !reflect.DeepEqual(before, after) {
		m.violate("a refused registration of node %s (%v) changed it: %+v -> %+v", id, err, before, after)
	}
	return false
}

func (m *model) claim(o op) {
	h := m.h
	ref, id := m.refs[o.vol], m.allocID(o.alloc)
	if err := h.alloc(m.ns, id, o.node, structs.AllocRunning); err != nil {
		return
	}
	m.mu.Lock()
	m.allocs[id] = o.node
	m.mu.Unlock()
	mark := callMarks(h)
	err := h.claim(ref, id, o.node, o.mode)
	m.mu.Lock()
	defer m.mu.Unlock()
	if err == nil {
		m.claimed[id] = ref
		m.machine[id] = machineOf(nodeMachine(o.node))
		m.liedClaim[id] = m.lied[o.node]
		if c := h.vol(ref).Claims[id]; c != nil && m.lied[o.node] {
			m.liedPairs[[2]string{externalID(ref.Namespace, ref.ID), c.ExternalNodeID}] = true
		}
		m.stats.claims++
		return
	}
	m.stats.refused++
	if m.lied[o.node] {
		// A refused claim's calls, and its rollback's, went to the ID
		// the host was told too (see liedPairs).
		if n, _ := h.store.Snapshot().NodeByID(nil, o.node); n != nil && n.Plugins[testPlugin] != nil {
			m.liedPairs[[2]string{externalID(ref.Namespace, ref.ID), n.Plugins[testPlugin].ExternalNodeID}] = true
		}
	}
	// A refused claim whose calls did not all answer OK may leave what
	// they did (a lost answer, a failed rollback step): the host logs it
	// and cannot know more. What it leaves is excused at the end, on that
	// machine and volume only.
	ext := externalID(ref.Namespace, ref.ID)
	for _, c := range mark.since(h) {
		if c.VolumeID == ext && c.Method == csitest.NodeUnpublish && c.Done && c.Code == codes.OK {
			m.rolledBack[c.TargetPath] = true
		}
		if c.VolumeID == ext && c.Code != codes.OK {
			m.leaked[[2]string{ext, machineOf(nodeMachine(o.node))}] = true
			if c.Method == csitest.ControllerPublish || c.Method == csitest.ControllerUnpublish {
				if mm := h.oracle.MachineOf(c.NodeID); mm != "" {
					m.leaked[[2]string{ext, mm}] = true
				}
			}
		}
	}
}

// marks are how many calls each plugin had recorded.
type marks map[*csitest.Server]int

func callMarks(h *harness) marks {
	mk := marks{h.ctl: len(h.ctl.AllCalls())}
	for _, n := range h.nodes {
		mk[n] = len(n.AllCalls())
	}
	return mk
}

func (mk marks) since(h *harness) []csitest.Call {
	var out []csitest.Call
	for s, n := range mk {
		out = append(out, s.AllCalls()[n:]...)
	}
	return out
}

// checkCall counts the destructive calls that reach a plugin; the
// oracle judges them.
func (m *model) checkCall(_ string, c csitest.Call) {
	if _, ok := m.byExt[c.VolumeID]; !ok {
		return // another run's volume
	}
	switch c.Method {
	case csitest.NodeUnstage:
		m.count(func(s *stats) { s.unstages++ })
	case csitest.ControllerUnpublish:
		m.count(func(s *stats) { s.unpublishes++ })
	}
}

// judgeOracleLocked turns the oracle's new spec violations on this run's
// volumes into the run's violation. Excused: a release that skipped the
// node steps of a node reported down (the operator said the machine is
// off; the policy may then skip them); a single-node publish refused, or
// a second staging path, because a refused claim's leak holds the disk;
// node steps on a machine whose agent gave the host an external node ID
// its plugin does not answer (the host publishes to the ID it was told).
func (m *model) judgeOracleLocked(last op) {
	all := m.h.oracle.Violations()
	snap := m.h.store.Snapshot()
	for _, v := range all[m.seen:] {
		if _, ours := m.byExt[v.Call.VolumeID]; !ours {
			continue
		}
		switch {
		case (v.Rule == csitest.RuleUnpublishAfterNode || v.Rule == csitest.RuleUnstageAfterUnpublish) &&
			m.down[v.Machine] && m.onlyEndedLocked(snap, v.Blocking):
			m.leaked[[2]string{v.Call.VolumeID, v.Machine}] = true
			m.stats.excused++
			continue
		case v.Rule == csitest.RuleSingleNode && m.leaked[[2]string{v.Call.VolumeID, m.h.oracle.MachineOf(v.With)}]:
			m.stats.excused++
			continue
		case v.Rule == csitest.RuleOneStagingPath && m.leaked[[2]string{v.Call.VolumeID, v.Machine}]:
			m.stats.excused++
			continue
		case v.Rule == csitest.RuleAttachedFirst && m.liedOnLocked(v.Machine):
			m.stats.excused++
			continue
		case (v.Call.Method == csitest.ControllerPublish || v.Call.Method == csitest.ControllerUnpublish) &&
			m.liedPairs[[2]string{v.Call.VolumeID, v.Call.NodeID}]:
			m.stats.excused++
			continue
		case (v.Rule == csitest.RuleOneStagingPath || v.Rule == csitest.RuleUnstageAfterUnpublish || v.Rule == csitest.RuleUnpublishAfterNode) &&
			m.staleAliasLocked(snap, v.Machine):
			m.stats.excused++
			continue
		}
		m.violateLocked("after %q: CSI spec violated: %s", last, v)
		break
	}
	m.seen = len(all)
}

// staleAliasLocked: machine mach is registered under two node IDs that
// report different external node IDs (one registration made stale by the
// other's hello after the plugin's instance was replaced): the host sees
// two machines and cannot learn otherwise. A direct-mode node's plugin is
// asked again before every claim, so no new claim is published from a
// stale registration, but the claims it holds stay on the old ID; an
// endpoint string is no machine identity (one socket path on two
// machines). RELIABILITY "What the host cannot know".
func (m *model) staleAliasLocked(snap *state.Snapshot, mach string) bool {
	exts := map[string]bool{}
	for _, id := range append(append([]string{}, modelNodes...), aliasNode) {
		n, _ := snap.NodeByID(nil, id)
		if n == nil || machineOf(nodeMachine(id)) != mach {
			continue
		}
		if np := n.Plugins[testPlugin]; np != nil && np.ExternalNodeID != "" {
			exts[np.ExternalNodeID] = true
		}
	}
	return len(exts) > 1
}

// onlyEndedLocked: every target among paths belongs to an ended
// allocation (target paths name their allocation: csi.Paths), so what
// blocks the call was left by node steps skipped on a node reported down.
func (m *model) onlyEndedLocked(snap *state.Snapshot, paths []string) bool {
	for _, p := range paths {
		parts := strings.Split(p, "/")
		i := slices.Index(parts, "per-alloc")
		if i < 0 || i+1 >= len(parts) {
			continue // a staging path: left when its last claim's steps were skipped
		}
		if a, _ := snap.AllocByID(nil, parts[i+1]); a == nil || !a.ClientStatus.Terminal() {
			return false
		}
	}
	return true
}

// checkState runs after every operation, with no call in flight.
func (m *model) checkState(last op) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.judgeOracleLocked(last)
	if m.violation != "" {
		return
	}
	snap := m.h.store.Snapshot()
	for id, ref := range m.claimed {
		v, _ := snap.VolumeByID(nil, ref.Namespace, ref.ID)
		a, _ := snap.AllocByID(nil, id)
		live := a != nil && !a.ClientStatus.Terminal()
		c := v.Claims[id]
		if c == nil {
			if live {
				m.violateLocked("after %q: the claim of live allocation %s on %s is lost", last, id, ref.ID)
				return
			}
			delete(m.claimed, id)
			m.stats.released++
			continue
		}
		if !live {
			continue
		}
		// The running allocation's volume, on the machine it runs on, as
		// the oracle holds it.
		ext, mach := externalID(ref.Namespace, ref.ID), m.machine[id]
		if !m.h.oracle.AttachedTo(ext, mach) && !m.liedClaim[id] {
			m.violateLocked("after %q: %s of running allocation %s is not attached to its machine %s (attachments %v)",
				last, ref.ID, id, mach, m.h.oracle.Attachments())
			return
		}
		if c.TargetPath == "" {
			continue // claimed while its node had no plugin endpoint: nothing published
		}
		if m.staleAliasLocked(snap, mach) {
			m.stats.excused++
			continue // one machine the host sees as two: see staleAliasLocked
		}
		st := m.h.oracle.Machine(mach)
		t, ok := st.Published[c.TargetPath]
		if !ok || t.VolumeID != ext {
			m.violateLocked("after %q: %s of running allocation %s is not published at its target %s on %s", last, ref.ID, id, c.TargetPath, mach)
			return
		}
		if st.Staged[t.StagingPath] != ext {
			m.violateLocked("after %q: running allocation %s's target %s on %s is published from %s, where %s is not staged (staged: %v)",
				last, id, c.TargetPath, mach, t.StagingPath, ref.ID, st.Staged)
			return
		}
	}
}

// drain ends every allocation, stops the faults, lets every node's plugin
// be reached again (agents reconnect saying what they said, endpoints come
// back) and runs passes until every claim is released; one that never is,
// is a violation.
func (m *model) drain() {
	h := m.h
	h.mods.set(m.ns, nil, nil)
	h.ctl.ClearScripts()
	for _, n := range h.nodes {
		n.ClearScripts()
	}
	for _, id := range append(append([]string{}, modelNodes...), aliasNode) {
		n, _ := h.store.Snapshot().NodeByID(nil, id)
		if n == nil {
			continue
		}
		_, _ = h.srv.UpdateNodeStatus(h.ctx, id, structs.NodeReady)
		np := n.Plugins[testPlugin]
		switch {
		case n.Agent && np != nil:
			ep := np.Endpoint
			if ep == "" {
				ep = h.nodes[nodeMachine(id)].Endpoint() // the plugin's socket is back
			}
			_, _ = h.hello(id, ep, np.ExternalNodeID, n.RootDir)
		case np == nil || np.Endpoint == "":
			_, _ = h.srv.RegisterNode(h.ctx, &structs.Node{ID: id, RootDir: n.RootDir,
				Plugins: map[string]*structs.NodePlugin{testPlugin: {Endpoint: h.nodes[nodeMachine(id)].Endpoint()}}})
		}
	}
	if !h.w.Enabled() {
		h.w.SetEnabled(true)
	}
	snap := h.store.Snapshot()
	m.mu.Lock()
	var live []*structs.Alloc
	for id := range m.allocs {
		if a, _ := snap.AllocByID(nil, id); a != nil && !a.ClientStatus.Terminal() {
			live = append(live, a)
		}
	}
	m.mu.Unlock()
	for _, a := range live {
		_ = h.alloc(m.ns, a.ID, a.NodeID, structs.AllocComplete)
	}
	for round := 0; round < 8; round++ {
		left := 0
		for _, name := range []string{"v0", "v1"} {
			ref := m.refs[name]
			_ = h.w.Assess(h.ctx, ref)
			m.checkState(op{kind: "drain"})
			left += len(m.h.vol(ref).Claims)
		}
		if left == 0 || m.violated() != "" {
			return
		}
		h.clock.Advance(10 * time.Second) // past the harness's backoff cap
	}
	for _, name := range []string{"v0", "v1"} {
		v := h.vol(m.refs[name])
		for id, c := range v.Claims {
			m.violate("claim of ended allocation %s on %s never released: %s, last error %v", id, name, c.State, c.LastError)
			return
		}
	}
}

// checkNothingLeft: with every claim released, nothing of the run's
// volumes is staged, published or attached on any machine, except where
// the host reported a leftover (volume and external node ID) or a refused
// claim's calls failed.
func (m *model) checkNothingLeft() {
	if m.violated() != "" {
		return
	}
	h := m.h
	leftovers, _ := h.store.Snapshot().Leftovers(nil)
	m.mu.Lock()
	defer m.mu.Unlock()
	excused := func(ext, mach string) bool {
		if m.leaked[[2]string{ext, mach}] || m.down[mach] {
			return true
		}
		for _, l := range leftovers {
			if l.ExternalID == ext && (h.oracle.MachineOf(l.ExternalNodeID) == mach || machineOf(nodeMachine(l.NodeID)) == mach) {
				return true
			}
		}
		return false
	}
	for _, a := range h.oracle.Attachments() {
		if _, ours := m.byExt[a.VolumeID]; ours && !excused(a.VolumeID, a.Machine) {
			m.violateLocked("at the end: %s is still attached to %s (machine %q) with no claim and no leftover reported", a.VolumeID, a.NodeID, a.Machine)
			return
		}
	}
	for _, mach := range h.oracle.Machines() {
		st := h.oracle.Machine(mach)
		for path, ext := range st.Staged {
			if _, ours := m.byExt[ext]; ours && !excused(ext, mach) {
				m.violateLocked("at the end: %s is still staged at %s on %s with no claim and no leftover reported", ext, path, mach)
				return
			}
		}
		for path, t := range st.Published {
			if _, ours := m.byExt[t.VolumeID]; ours && !excused(t.VolumeID, mach) {
				m.violateLocked("at the end: %s is still published at %s on %s with no claim and no leftover reported", t.VolumeID, path, mach)
				return
			}
		}
	}
}

// shrink removes operations from a failing sequence while it still fails,
// one at a time, until none can go: the sequence a reader needs.
func shrink(h *harness, seed int, ops []op, violation string) ([]op, string) {
	run := 0
	for changed := true; changed; {
		changed = false
		for i := 0; i < len(ops); i++ {
			cand := append(append([]op{}, ops[:i]...), ops[i+1:]...)
			run++
			if v := runModel(h, fmt.Sprintf("m%d-%d", seed, run), cand, nil); v != "" {
				ops, violation, changed = cand, v, true
				i--
			}
		}
	}
	return ops, violation
}

// stepDownMidCall runs a release pass over o.vol whose first destructive
// call (NodeUnpublish, NodeUnstage, ControllerUnpublish) of the volume, if
// it sends one, runs slowly on the driver: the leader steps down while it
// waits (the pass's context ends, so nothing after the call is written)
// and the driver goes on, finishing the call after the next operation
// (finishSlow). The call is scripted as it arrives; when an earlier
// scripted outcome of the method is queued, that one answers it and the
// slow one, released at once, lets a later call run normally.
func (m *model) stepDownMidCall(o op) {
	h := m.h
	ref := m.refs[o.vol]
	ext := externalID(ref.Namespace, ref.ID)
	block := make(chan struct{})
	type hit struct {
		srv    *csitest.Server
		method string
		before int
	}
	armed := make(chan hit, 1)
	var fired atomic.Bool
	h.setOnCall(func(plugin string, c csitest.Call) {
		m.checkCall(plugin, c)
		switch c.Method {
		case csitest.NodeUnpublish, csitest.NodeUnstage, csitest.ControllerUnpublish:
		default:
			return
		}
		if c.VolumeID != ext || !fired.CompareAndSwap(false, true) {
			return
		}
		srv := h.ctl
		if plugin != "controller" {
			srv = h.nodes[plugin]
		}
		armed <- hit{srv: srv, method: c.Method, before: srv.InFlight(c.Method)}
		srv.Script(c.Method, csitest.Result{Block: block, Ran: true})
	})
	defer h.setOnCall(m.checkCall)
	pass, stepDown := context.WithCancel(h.ctx)
	defer stepDown()
	done := make(chan struct{})
	go func() { defer close(done); _ = h.w.Assess(pass, ref) }()
	var got hit
	select {
	case got = <-armed:
	case <-done:
		select {
		case got = <-armed:
		default:
			close(block)
			return
		}
	}
	wait, stop := context.WithCancel(h.ctx)
	go func() {
		select {
		case <-done:
		case <-wait.Done():
		}
		stop()
	}()
	running := func() bool { return got.srv.InFlight(got.method) > got.before }
	_ = got.srv.WaitFor(wait, running)
	stop()
	stepDown()
	<-done
	if !running() {
		close(block)
		return
	}
	m.count(func(s *stats) { s.stepdowns++ })
	// While its call runs, the driver answers ABORTED to another call
	// on the volume, as the CSI spec asks of a driver with an operation
	// pending (the host relies on it: RATIONALE "A claim waits for an
	// unstage in doubt"); a retry answered OK while the first call
	// still runs would end the doubt early, which no CO can see.
	got.srv.SetAbortPending(true)
	seq := 0
	for _, c := range got.srv.Calls(got.method) {
		if !c.Done && c.VolumeID == ext {
			seq = c.Seq
		}
	}
	m.slow = &slowCall{srv: got.srv, seq: seq, block: block}
}

// finishSlow lets the driver finish the slow call c (nil: none) and waits
// until it has.
func (m *model) finishSlow(c *slowCall) {
	if c == nil {
		return
	}
	if m.slow == c {
		m.slow = nil
	}
	close(c.block)
	_ = c.srv.WaitFor(m.h.ctx, func() bool {
		for _, call := range c.srv.AllCalls() {
			if call.Seq == c.seq {
				return call.Done
			}
		}
		return true
	})
	if m.slow == nil || m.slow.srv != c.srv {
		c.srv.SetAbortPending(false)
	}
}
