package watcher

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/volhost/volhost/abi"
	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/watcher/attach"
)

// A module confirms a fence (ABI 1.1's volhost_confirm_fence export).
//
// A claim whose node only missed heartbeats is held by the host until the
// node is fenced (nodes.go): a timeout is no proof that a node is off. An
// adapter module exporting volhost_confirm_fence may supply that proof
// (an operator's automation lists terminated instances in its config): the
// watcher asks it about the node, and a confirmation is committed as a
// fence through the log, by the leader's term, and only once committed do
// the claims skip their node steps. The module can only make the host
// wait less for a node that is already heartbeat-lost: the watcher asks
// only about such a node, checks the answer names it, re-reads the node
// before writing, and the store refuses the fence unless the node is still
// lost since the time the module was told (host/state validateModuleFence).
// A fault, a timeout, a refusal or "no" leaves the claims held, and the
// module is asked again after its retry_after or the host's backoff, once
// per node and module whichever volume's pass asks.

// StepConfirmFence names the ABI 1.1 call in claim errors and logs.
const StepConfirmFence = "confirm-fence"

// FenceConfirmer is implemented by an Adapter that may confirm that a
// lost node is off: a csi-adapter module exporting volhost_confirm_fence.
type FenceConfirmer interface {
	// ConfirmsFence reports whether the adapter can be asked now (its
	// serving generation exports volhost_confirm_fence).
	ConfirmsFence() bool
	ConfirmFence(ctx context.Context, req *abi.FenceRequest) (*abi.FenceResponse, error)
}

// NodeFencer is implemented by a ClaimWriter that can commit a module's
// fence (host/cluster's). Without it no module is asked.
type NodeFencer interface {
	FenceNode(ctx context.Context, req *structs.NodeFenceRequest) (uint64, error)
}

// fenceRuntime is the part of the module runtime (*plugins.Manager) that
// serves ABI 1.1's volhost_confirm_fence.
type fenceRuntime interface {
	ConfirmsFence(module string) bool
	ConfirmFence(ctx context.Context, module string, req *abi.FenceRequest) (*abi.FenceResponse, error)
}

var _ FenceConfirmer = (*wasmModule)(nil)

// ConfirmsFence implements FenceConfirmer.
func (w *wasmModule) ConfirmsFence() bool {
	rt, ok := w.m.rt.(fenceRuntime)
	return ok && w.kind == abi.KindCSIAdapter && rt.ConfirmsFence(w.name)
}

// ConfirmFence implements FenceConfirmer. There is no on_failure fallback:
// whatever fails, the answer is "not confirmed", and the claims wait.
func (w *wasmModule) ConfirmFence(ctx context.Context, req *abi.FenceRequest) (resp *abi.FenceResponse, err error) {
	rt, ok := w.m.rt.(fenceRuntime)
	if !ok {
		return nil, errors.New("the module runtime does not serve volhost_confirm_fence")
	}
	defer w.observe(time.Now(), &err)
	return rt.ConfirmFence(ctx, w.name, req)
}

// fenceAsks remembers, per lost node and module, when the module may be
// asked next, so a node is asked about once per window however many
// volumes wait on it, and not on every pass. The zero value is ready.
type fenceAsks struct {
	mu sync.Mutex
	m  map[fenceKey]*fenceAsk
}

type fenceKey struct{ node, module string }

type fenceAsk struct {
	lostSince time.Time // the loss of the node this is about
	next      time.Time // no ask before
	answers   uint32    // answers (or faults) so far about this loss
	inflight  bool      // a pass is asking now
	note      string    // the last outcome, shown in the hold
}

// begin reports whether the caller may ask now (and must then call end);
// otherwise it returns the last outcome and when the next ask is due
// (zero while another pass is asking).
func (a *fenceAsks) begin(k fenceKey, lostSince, now time.Time) (ask bool, answers uint32, note string, next time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.m == nil {
		a.m = make(map[fenceKey]*fenceAsk)
	}
	e := a.m[k]
	if e == nil || !e.lostSince.Equal(lostSince) {
		e = &fenceAsk{lostSince: lostSince}
		a.m[k] = e
	}
	switch {
	case e.inflight:
		return false, e.answers, "its answer is awaited", time.Time{}
	case now.Before(e.next):
		return false, e.answers, e.note, e.next
	}
	e.inflight = true
	return true, e.answers, e.note, time.Time{}
}

// end records an ask's outcome; counted is false when the pass gave up
// (step-down) before an answer.
func (a *fenceAsks) end(k fenceKey, note string, next time.Time, counted bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	e := a.m[k]
	if e == nil {
		return
	}
	e.inflight = false
	if counted {
		e.answers++
		e.note, e.next = note, next
	}
}

// forget drops a node's entry once it is fenced.
func (a *fenceAsks) forget(k fenceKey) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.m, k)
}

// lostNodeVerdict is the verdict for a claim the policy would release
// skipping the node step of a node that only missed heartbeats: release
// if the volume's adapter module confirms the fence and it is committed,
// else the host's hold (lostHeartbeatHold) with the module's last answer.
// The error is only for a cancelled context or a failed store read/write
// that is not a refusal.
func (p *pass) lostNodeVerdict(ctx context.Context, c *structs.Claim, release verdict) (verdict, error) {
	hold := p.lostHeartbeatHold(c)
	fc, ok := p.adapter.(FenceConfirmer)
	fencer, canFence := p.w.deps.Writer.(NodeFencer)
	n := p.nodes[c.NodeID]
	if !ok || !canFence || n.StatusSince.IsZero() || !fc.ConfirmsFence() {
		return hold, nil
	}
	name, _ := attach.ModuleOf(p.adapter)
	k := fenceKey{node: c.NodeID, module: name}
	ask, answers, note, next := p.w.fenceAsks.begin(k, n.StatusSince, p.now)
	if !ask {
		return p.fenceHold(hold, name, note, next), nil
	}
	fenced, note, retry, err := p.askFence(ctx, fc, fencer, c, answers)
	switch {
	case err != nil:
		p.w.fenceAsks.end(k, "", time.Time{}, false)
		return verdict{}, err
	case fenced:
		p.w.fenceAsks.forget(k)
		return release, nil
	}
	next = p.now.Add(retry)
	p.w.fenceAsks.end(k, note, next, true)
	return p.fenceHold(hold, name, note, next), nil
}

// fenceHold adds the module's last answer to the host's hold and wakes the
// volume when the module may be asked again.
func (p *pass) fenceHold(hold verdict, module, note string, next time.Time) verdict {
	if note != "" {
		hold.reason += fmt.Sprintf("; adapter module %s: %s", module, note)
	}
	switch {
	case next.IsZero(): // another pass is asking: look again soon
		hold.retryAfter = p.w.cfg.BackoffBase
	case next.After(p.now):
		hold.retryAfter = next.Sub(p.now)
	}
	return hold
}

// askFence asks the adapter about c's node and, on a confirmation, commits
// the fence. It returns whether the node is now fenced (p.nodes updated
// from committed state), else the outcome for the hold and when to ask
// again. A note must not vary between equal outcomes: a changed hold
// reason is a log write.
func (p *pass) askFence(ctx context.Context, fc FenceConfirmer, fencer NodeFencer, c *structs.Claim, answers uint32) (fenced bool, note string, retry time.Duration, err error) {
	n := p.nodes[c.NodeID]
	lostSince := n.StatusSince
	name, version := attach.ModuleOf(p.adapter)
	req := &abi.FenceRequest{
		NowUnixMs:    p.now.UnixMilli(),
		Node:         attach.NodeView(p.v.PluginID, c.NodeID, n, p.now, true),
		Plugin:       attach.PluginView(p.v.PluginID, p.plugin, n),
		LostAgeMs:    max(p.now.Sub(lostSince).Milliseconds(), 0),
		StatusReason: n.StatusReason,
		Volume:       attach.VolumeView(p.v),
		Attempts:     answers,
	}
	for _, o := range p.sortedClaims() {
		if o.NodeID == c.NodeID {
			req.Claims = append(req.Claims, attach.ClaimView(o))
		}
	}
	backoff := p.w.backoff(int(answers) + 1)
	log := p.log.With("node", c.NodeID, "module", name, "module_version", version)

	resp, err := fc.ConfirmFence(ctx, req)
	if err == nil && resp == nil {
		err = attach.BadOutput("no response")
	}
	if err == nil && resp.Error != "" {
		err = attach.GuestError(resp.Error)
	}
	if err == nil {
		// The runtime validated it already; a FenceConfirmer need not be
		// one, and the rule is the host's.
		if msg := abi.FenceAnswerError(req, resp); msg != "" {
			err = attach.BadOutput(msg)
		}
	}
	if err != nil {
		if ctx.Err() != nil {
			return false, "", 0, ctx.Err()
		}
		fault := attach.ModuleError(p.adapter, StepConfirmFence, err)
		log.Warn("fence confirmation failed: the node's claims stay held", "fault", fault.Fault, "error", err)
		return false, fmt.Sprintf("could not confirm the fence (%s fault), so it is not fenced", fault.Fault), backoff, nil
	}
	if !resp.Confirmed {
		retry = p.w.clampRetry(resp.RetryAfterMs)
		if retry == 0 {
			retry = backoff
		}
		log.Debug("fence not confirmed", "reason", resp.Reason, "retry_after", retry)
		return false, "does not confirm it is off: " + orText(resp.Reason, "no reason given"), retry, nil
	}

	// Confirmed. Committed state decides: the node must still be the lost
	// node the module was asked about.
	cur, err := p.w.deps.State.Node(c.NodeID)
	if err != nil {
		return false, "", 0, fmt.Errorf("re-read node %s: %w", c.NodeID, err)
	}
	switch {
	case cur != nil && cur.Fence != nil: // fenced meanwhile (an operator, another pass)
		p.nodes[c.NodeID] = cur
		return true, "", 0, nil
	case cur == nil || !cur.HeartbeatLost || cur.Status == structs.NodeReady || !cur.StatusSince.Equal(lostSince):
		status := "gone from the store"
		if cur != nil {
			status = string(cur.Status)
		}
		log.Warn("fence confirmation refused: the node is no longer lost as the module was told", "status", status)
		return false, "confirmed the fence of a node that is no longer lost as it was told: refused", backoff, nil
	}
	source := structs.FenceSourceModule(name, version)
	_, err = fencer.FenceNode(ctx, &structs.NodeFenceRequest{
		NodeID: c.NodeID, LostSince: lostSince, Term: p.term,
		Fence: &structs.NodeFence{Reason: resp.Reason, Source: source, Accessor: source, Time: p.now},
	})
	switch {
	case err != nil && ctx.Err() != nil:
		return false, "", 0, ctx.Err()
	case errors.Is(err, structs.ErrConflict), errors.As(err, new(*structs.ValidationError)):
		log.Warn("fence confirmation refused by the store", "error", err)
		return false, "confirmed the fence, but the store refused it: " + err.Error(), backoff, nil
	case err != nil:
		return false, "", 0, fmt.Errorf("commit the fence of node %s confirmed by module %s: %w", c.NodeID, name, err)
	}
	if cur, err = p.w.deps.State.Node(c.NodeID); err != nil {
		return false, "", 0, fmt.Errorf("re-read node %s: %w", c.NodeID, err)
	}
	if cur == nil || cur.Fence == nil {
		return false, "confirmed the fence, but it is not in the store", backoff, nil
	}
	p.nodes[c.NodeID] = cur
	log.Warn("node fenced by an adapter module: its claims skip their node steps", "reason", resp.Reason)
	return true, "", 0, nil
}
