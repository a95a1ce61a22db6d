package plugins

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/volhost/volhost/abi"
)

// Rollout: a shadow candidate answers beside the serving
// generation on the same requests and never acts; `module promote` makes it
// serve and keeps the generation it replaced as the last known good;
// `module rollback` (or too many faults of a promoted generation) returns
// to it. Every swap here is the same atomic pointer swap a reload makes, so
// calls in flight finish on the generation they started on.

// Rollout events.
const (
	EventShadowing       EventKind = "shadowing"        // a candidate runs beside the serving generation
	EventShadowDisagreed EventKind = "shadow-disagreed" // the candidate answered otherwise (Reason: both answers)
	EventPromoted        EventKind = "promoted"         // the candidate serves; the old one is the last known good
	EventRolledBack      EventKind = "rolled-back"      // the last known good serves again (Reason: why)
	EventShadowDiscarded EventKind = "shadow-discarded" // the operator dropped the candidate
)

// Roles of a generation in Call.
const (
	RoleServing       = "serving"
	RoleShadow        = "shadow"
	RoleLastKnownGood = "last_known_good"
)

// Call is one module call, reported to Options.OnCall (per-generation
// metrics).
type Call struct {
	Module     string
	Generation uint64
	Role       string
	Duration   time.Duration
	Fault      FaultKind // "" for success
}

// Errors of Promote and Rollback; callers branch on them (404 / 409).
var (
	ErrNoModule        = errors.New("no such module")
	ErrNoShadow        = errors.New("no shadow candidate")
	ErrNoLastKnownGood = errors.New("no last known good generation to return to")
	// ErrSelectionChange: the candidate's manifest selects other volumes
	// than the serving one's, and the promote did not allow it.
	ErrSelectionChange = errors.New("promoting would change which volumes the module judges")
)

// PromoteOptions are what an operator allows a promote to do.
type PromoteOptions struct {
	// AllowSelectionChange lets a candidate whose manifest selects other
	// volumes (default, plugin_ids, volumes) serve. Without it such a
	// promote is refused: a scaffold's manifest without default = true
	// once made the default policy select nothing, silently.
	AllowSelectionChange bool
}

// GenerationInfo names a generation.
type GenerationInfo struct {
	Generation uint64 `json:"generation"`
	Version    string `json:"version"`
	SHA256     string `json:"sha256"`
}

// ShadowStatus is a shadow candidate and how often it agreed.
type ShadowStatus struct {
	GenerationInfo
	Calls         uint64 `json:"calls"`
	Disagreements uint64 `json:"disagreements"`
	// AgreementPercent is 100 * (calls - disagreements) / calls (100 with
	// no calls yet).
	AgreementPercent float64 `json:"agreement_percent"`
	LastDisagreement string  `json:"last_disagreement,omitempty"`
	// LastDisagreementNamespace is the namespace of the volume the last
	// disagreement was about: its text names the volume, so the API
	// shows it only to a token that may read that namespace.
	LastDisagreementNamespace string `json:"last_disagreement_namespace,omitempty"`
	// ManifestChanges are how the candidate's manifest differs from the
	// serving generation's (empty: the same selection, kind, version,
	// limits and failure strategy).
	ManifestChanges []ManifestChange `json:"manifest_changes,omitempty"`
}

// RecentFault is one of the serving generation's last faults.
type RecentFault struct {
	Time       time.Time `json:"time"`
	Generation uint64    `json:"generation"`
	Kind       string    `json:"kind"`
	Message    string    `json:"message"`
	// Namespace and VolumeID name the volume of the call that faulted
	// ("" for a call about none): the message may quote it (the guest's
	// own error and output included), so the API shows the fault only to
	// a token that may read that namespace.
	Namespace string `json:"namespace,omitempty"`
	VolumeID  string `json:"volume_id,omitempty"`
}

// maxRecentFaults bounds RecentFaults.
const maxRecentFaults = 10

// shadowStats count a shadow candidate's comparisons (reset per candidate).
type shadowStats struct {
	shadowCalls    atomic.Uint64
	shadowDisagree atomic.Uint64
	lastDisagreeMu sync.Mutex
	lastDisagree   string
	lastDisagreeNS string
}

// faultWindow keeps a promoted generation's recent fault times.
type faultWindow struct {
	mu    sync.Mutex
	times []time.Time
}

// add records a fault at now and returns how many fell within window.
func (w *faultWindow) add(now time.Time, window time.Duration) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	kept := w.times[:0]
	for _, t := range w.times {
		if now.Sub(t) < window {
			kept = append(kept, t)
		}
	}
	w.times = append(kept, now)
	return len(w.times)
}

func info(g *generation) *GenerationInfo {
	if g == nil {
		return nil
	}
	return &GenerationInfo{Generation: g.num, Version: g.version, SHA256: g.sha}
}

func (m *Manager) observe(c Call) {
	if m.opts.OnCall != nil {
		m.opts.OnCall(c)
	}
}

// shadowLocked makes g the shadow candidate of mod. A module with nothing
// serving has nothing to be compared with: the candidate is refused.
func (m *Manager) shadowLocked(mod *module, g *generation) {
	if mod.cur.Load() == nil {
		g.retire()
		m.refuseLocked(mod, g.fp, fmt.Sprintf("mode = %q, but no generation of %s serves to be shadowed: load one with mode = %q first", ModeShadow, mod.name, ModeServe))
		return
	}
	if old := mod.shadow.Swap(g); old != nil {
		m.retireGeneration(old)
	}
	mod.shadowCalls.Store(0)
	mod.shadowDisagree.Store(0)
	mod.lastDisagreeMu.Lock()
	mod.lastDisagree, mod.lastDisagreeNS = "", ""
	mod.lastDisagreeMu.Unlock()
	mod.mu.Lock()
	mod.shadowFP, mod.refusal, mod.refusedFP = g.fp, "", ""
	mod.mu.Unlock()
	m.log.Info("module shadowing", "module", mod.name, "version", g.version, "generation", g.num, "sha256", g.sha)
	m.emit(Event{Kind: EventShadowing, Module: mod.name, Generation: g.num, Version: g.version})
}

// keepLastKnownGood keeps old (just replaced) for rollback; the one before
// it retires.
func (m *Manager) keepLastKnownGood(mod *module, old *generation) {
	if before := mod.prev.Swap(old); before != nil {
		m.retireGeneration(before)
	}
}

func (m *Manager) dropShadowAndPrev(mod *module) {
	if g := mod.shadow.Swap(nil); g != nil {
		m.retireGeneration(g)
	}
	if g := mod.prev.Swap(nil); g != nil {
		m.retireGeneration(g)
	}
	mod.mu.Lock()
	mod.shadowFP = ""
	mod.mu.Unlock()
}

// shadowCompare runs the request on mod's shadow candidate, if any, and
// counts whether it answered like the serving generation did (served, or
// the fault servedErr). The candidate's answer is never returned: it only
// counts. The caller's own cancellation skips the comparison.
func shadowCompare[R any](ctx context.Context, m *Manager, name, export string, req abi.Message, served *R, servedErr error,
	decoder func(*R) func([]byte) (string, error)) {
	mod := (*m.modules.Load())[name]
	if mod == nil {
		return
	}
	g := mod.shadow.Load()
	if g == nil || ctx.Err() != nil || !g.acquire() {
		return
	}
	defer g.release()
	var sfe *FaultError
	if servedErr != nil && (!errors.As(servedErr, &sfe) || !sfe.Kind.countsForBreaker()) {
		// Not an answer of the serving generation: the caller gave up,
		// or the host refused the call (open circuit).
		return
	}
	buf := getBuf()
	*buf = req.MarshalAppend((*buf)[:0])
	shadow := new(R)
	start := time.Now()
	err := g.call(ctx, export, *buf, decoder(shadow))
	putBuf(buf)
	if ctx.Err() != nil {
		return
	}
	fe := faultOf(err)
	c := Call{Module: name, Generation: g.num, Role: RoleShadow, Duration: time.Since(start)}
	if fe != nil {
		c.Fault = fe.Kind
	}
	m.observe(c)
	agree := false
	switch {
	case sfe == nil && fe == nil:
		agree = reflect.DeepEqual(served, shadow)
	case sfe != nil && fe != nil:
		agree = sfe.Kind == fe.Kind
	}
	mod.shadowCalls.Add(1)
	if agree {
		return
	}
	mod.shadowDisagree.Add(1)
	ns, vol := requestVolume(req)
	reason := fmt.Sprintf("%s: serving generation answered %s, shadow generation %d answered %s",
		export, answerText(served, sfe), g.num, answerText(shadow, fe))
	if vol != "" {
		reason = "volume " + ns + "/" + vol + ": " + reason
	}
	mod.lastDisagreeMu.Lock()
	mod.lastDisagree, mod.lastDisagreeNS = reason, ns
	mod.lastDisagreeMu.Unlock()
	m.emit(Event{Kind: EventShadowDisagreed, Module: name, Generation: g.num, Version: g.version, Reason: reason,
		Namespace: ns, VolumeID: vol})
}

// requestVolume is the volume a request is about ("" when it names none).
func requestVolume(req abi.Message) (namespace, id string) {
	switch r := req.(type) {
	case *abi.PolicyRequest:
		return r.Volume.Namespace, r.Volume.ID
	case *abi.AdapterRequest:
		return r.Volume.Namespace, r.Volume.ID
	}
	return "", ""
}

// actionNames and outcomeNames spell the ABI's enums in an answer's text:
// `"Action":1` against `"Action":2` told an operator nothing.
var (
	actionNames  = map[abi.Action]string{abi.ActionRelease: "release", abi.ActionWait: "wait", abi.ActionReleaseSkipNode: "release-skip-node"}
	outcomeNames = map[abi.Outcome]string{abi.OutcomeDone: "done", abi.OutcomeRetry: "retry", abi.OutcomeFatal: "fatal"}
)

func enumName[E ~uint32](names map[E]string, v E) string {
	if n, ok := names[v]; ok {
		return n
	}
	return fmt.Sprintf("unspecified(%d)", v)
}

func answerText(resp any, fe *FaultError) string {
	if fe != nil {
		return "fault " + string(fe.Kind) + " (" + fe.Error() + ")"
	}
	switch r := resp.(type) {
	case *abi.PolicyResponse:
		if r.Error != "" {
			return "error " + strconv.Quote(r.Error)
		}
		parts := make([]string, len(r.Decisions))
		for i, d := range r.Decisions {
			parts[i] = d.AllocID + " " + enumName(actionNames, d.Action)
			if d.RetryAfterMs > 0 {
				parts[i] += " " + (time.Duration(d.RetryAfterMs) * time.Millisecond).String()
			}
			if d.Reason != "" {
				parts[i] += " (" + d.Reason + ")"
			}
		}
		return "[" + strings.Join(parts, "; ") + "]"
	case *abi.ClassifyResponse:
		if r.Error != "" {
			return "error " + strconv.Quote(r.Error)
		}
		s := enumName(outcomeNames, r.Outcome)
		if r.RetryAfterMs > 0 {
			s += " after " + (time.Duration(r.RetryAfterMs) * time.Millisecond).String()
		}
		if r.Reason != "" {
			s += " (" + r.Reason + ")"
		}
		return s
	}
	b, err := json.Marshal(resp)
	if err != nil {
		return fmt.Sprintf("%+v", resp)
	}
	return string(b)
}

// Promote makes name's shadow candidate serve; the generation it replaces
// becomes the last known good. A promoted generation is rolled back
// automatically when it faults past its manifest's rollback limit.
func (m *Manager) Promote(ctx context.Context, name string) (Status, error) {
	return m.PromoteWith(ctx, name, PromoteOptions{})
}

// PromoteWith is Promote with what the operator allows: a candidate that
// changes the module's selection is refused, naming the change, unless
// opts allow it.
func (m *Manager) PromoteWith(ctx context.Context, name string, opts PromoteOptions) (Status, error) {
	m.reloadMu.Lock()
	defer m.reloadMu.Unlock()
	mod, err := m.moduleLocked(name)
	if err != nil {
		return Status{}, err
	}
	g := mod.shadow.Load()
	if g == nil {
		return Status{}, fmt.Errorf("module %s: %w (load one with mode = %q or `volhost module shadow`)", name, ErrNoShadow, ModeShadow)
	}
	if cur := mod.cur.Load(); cur != nil && !opts.AllowSelectionChange {
		if sel := selectionChanges(ManifestChanges(cur.man, g.man)); len(sel) > 0 {
			return Status{}, fmt.Errorf("module %s: %w: %s", name, ErrSelectionChange, joinChanges(sel))
		}
	}
	g.promoted.Store(true)
	mod.shadow.Store(nil)
	old := mod.cur.Swap(g)
	mod.mu.Lock()
	// The files that served until now are not loaded again by a reload
	// (a candidate from `module shadow` leaves them in the directory).
	mod.refusedFP, mod.refusal = mod.servingFP, ""
	mod.state, mod.gens, mod.servingFP, mod.shadowFP, mod.recent = StateServing, g.num, g.fp, "", nil
	mod.mu.Unlock()
	var oldMan *Manifest
	if old != nil {
		oldMan = old.man
		m.keepLastKnownGood(mod, old)
	}
	mod.breaker.reset()
	m.log.Info("module promoted", "module", name, "version", g.version, "generation", g.num)
	m.emit(Event{Kind: EventPromoted, Module: name, Generation: g.num, Version: g.version,
		Reason: fmt.Sprintf("agreed on %.1f%% of %d shadow calls", agreement(mod), mod.shadowCalls.Load())})
	m.notifySwap(Swap{Module: name, Kind: g.man.Kind, Generation: g.num, old: oldMan, new: g.man})
	return mod.status(), nil
}

// DiscardShadow drops name's shadow candidate (`volhost module discard`).
// A candidate loaded from the module directory is remembered as refused,
// so a reload does not bring the same files back; new files load as
// usual.
func (m *Manager) DiscardShadow(ctx context.Context, name string) (Status, error) {
	m.reloadMu.Lock()
	defer m.reloadMu.Unlock()
	mod, err := m.moduleLocked(name)
	if err != nil {
		return Status{}, err
	}
	g := mod.shadow.Swap(nil)
	if g == nil {
		return Status{}, fmt.Errorf("module %s: %w to discard", name, ErrNoShadow)
	}
	reason := fmt.Sprintf("shadow candidate generation %d (version %s) discarded by the operator", g.num, g.version)
	mod.mu.Lock()
	mod.refusedFP, mod.refusal, mod.shadowFP = mod.shadowFP, reason, ""
	mod.mu.Unlock()
	mod.shadowCalls.Store(0)
	mod.shadowDisagree.Store(0)
	mod.lastDisagreeMu.Lock()
	mod.lastDisagree, mod.lastDisagreeNS = "", ""
	mod.lastDisagreeMu.Unlock()
	m.retireGeneration(g)
	m.log.Info("module shadow discarded", "module", name, "generation", g.num, "version", g.version)
	m.emit(Event{Kind: EventShadowDiscarded, Module: name, Generation: g.num, Version: g.version, Reason: reason})
	return mod.status(), nil
}

// Rollback returns name to its last known good generation. The generation
// rolled back from is remembered as refused, so a reload does not bring
// the same files back; new files load as usual.
func (m *Manager) Rollback(ctx context.Context, name string) (Status, error) {
	m.reloadMu.Lock()
	defer m.reloadMu.Unlock()
	mod, err := m.moduleLocked(name)
	if err != nil {
		return Status{}, err
	}
	if err := m.rollbackLocked(mod, nil, "by the operator"); err != nil {
		return Status{}, err
	}
	return mod.status(), nil
}

// rollbackLocked swaps the last known good in for the serving generation
// (for only, when not nil: an automatic rollback must not undo a newer
// swap). Called with reloadMu held.
func (m *Manager) rollbackLocked(mod *module, only *generation, why string) error {
	cur := mod.cur.Load()
	if only != nil && cur != only {
		return nil
	}
	prev := mod.prev.Load()
	if prev == nil || cur == nil {
		return fmt.Errorf("module %s: %w", mod.name, ErrNoLastKnownGood)
	}
	mod.prev.Store(nil)
	mod.cur.Store(prev)
	reason := fmt.Sprintf("generation %d (version %s) rolled back to generation %d (version %s) %s", cur.num, cur.version, prev.num, prev.version, why)
	mod.mu.Lock()
	mod.state, mod.gens, mod.servingFP = StateServing, prev.num, prev.fp
	mod.refusedFP, mod.refusal = cur.fp, reason
	mod.mu.Unlock()
	m.retireGeneration(cur)
	if mod.breaker.reset() {
		m.emit(Event{Kind: EventCircuitClosed, Module: mod.name, Generation: prev.num, Version: prev.version, Reason: "rolled back"})
	}
	m.log.Warn("module rolled back", "module", mod.name, "reason", reason)
	m.emit(Event{Kind: EventRolledBack, Module: mod.name, Generation: prev.num, Version: prev.version, Reason: reason})
	m.notifySwap(Swap{Module: mod.name, Kind: prev.man.Kind, Generation: prev.num, old: cur.man, new: prev.man})
	return nil
}

// noteFault keeps a serving generation's fault for status, with the
// volume req was about, and, for a promoted one, counts it against its
// rollback limit.
func (m *Manager) noteFault(mod *module, g *generation, fe *FaultError, req abi.Message) {
	if !fe.Kind.countsForBreaker() {
		return
	}
	now := m.opts.Clock.Now()
	mod.mu.Lock()
	if mod.cur.Load() == g {
		ns, vol := requestVolume(req)
		mod.recent = append(mod.recent, RecentFault{Time: now, Generation: g.num, Kind: string(fe.Kind), Message: fe.Error(), Namespace: ns, VolumeID: vol})
		if len(mod.recent) > maxRecentFaults {
			mod.recent = mod.recent[len(mod.recent)-maxRecentFaults:]
		}
	}
	mod.mu.Unlock()
	if !g.promoted.Load() {
		return
	}
	lim := g.man.Rollback
	if n := g.faults.add(now, lim.Window); n >= lim.MaxFaults {
		m.autoRollback(mod, g, fmt.Sprintf("automatically: %d faults within rollback.window = %s (rollback.max_faults = %d)", n, lim.Window, lim.MaxFaults))
	}
}

// autoRollback rolls a faulting promoted generation back. It never waits
// for a reload in progress (this runs on a call's path): the next fault,
// or the next call its open circuit refuses, tries again.
func (m *Manager) autoRollback(mod *module, g *generation, why string) {
	if !g.promoted.Load() || mod.prev.Load() == nil || !m.reloadMu.TryLock() {
		return
	}
	defer m.reloadMu.Unlock()
	if m.closed {
		return
	}
	_ = m.rollbackLocked(mod, g, why)
}

func agreement(mod *module) float64 {
	calls := mod.shadowCalls.Load()
	if calls == 0 {
		return 100
	}
	return 100 * float64(calls-mod.shadowDisagree.Load()) / float64(calls)
}

// rolloutStatus fills the rollout fields of s.
func (mod *module) rolloutStatus(s *Status) {
	if g := mod.cur.Load(); g != nil {
		s.OnFailure, s.Promoted = g.man.OnFailure, g.promoted.Load()
	}
	s.LastKnownGood = info(mod.prev.Load())
	s.BreakerOpen = mod.breaker.isOpen()
	if g := mod.shadow.Load(); g != nil {
		mod.lastDisagreeMu.Lock()
		last, lastNS := mod.lastDisagree, mod.lastDisagreeNS
		mod.lastDisagreeMu.Unlock()
		s.Shadow = &ShadowStatus{GenerationInfo: *info(g), Calls: mod.shadowCalls.Load(),
			Disagreements: mod.shadowDisagree.Load(), AgreementPercent: agreement(mod), LastDisagreement: last, LastDisagreementNamespace: lastNS}
		if cur := mod.cur.Load(); cur != nil {
			s.Shadow.ManifestChanges = ManifestChanges(cur.man, g.man)
		}
	}
}

// moduleLocked is the module an operator's rollout command names, called
// with reloadMu held: ErrClosed after Close, ErrNoModule for a name no
// module has.
func (m *Manager) moduleLocked(name string) (*module, error) {
	if m.closed {
		return nil, ErrClosed
	}
	mod := (*m.modules.Load())[name]
	if mod == nil {
		return nil, fmt.Errorf("module %s: %w", name, ErrNoModule)
	}
	return mod, nil
}

// OnFailure is the failure strategy of name's serving generation
// (OnFailureWait when it has none).
func (m *Manager) OnFailure(name string) string {
	if mod := (*m.modules.Load())[name]; mod != nil {
		if g := mod.cur.Load(); g != nil {
			return g.man.OnFailure
		}
	}
	return OnFailureWait
}

// lastKnownGoodCall runs a call for on_failure = "last_known_good" on
// name's last known good generation: the previous one, or, when generation
// faulted has just been rolled back, the one serving now. Never on faulted
// itself. Its answer is validated like any other (the decoder), and the
// watcher checks it again.
func (m *Manager) lastKnownGoodCall(ctx context.Context, name string, faulted uint64, export string, req abi.Message, decode func([]byte) (string, error)) error {
	mod := (*m.modules.Load())[name]
	if mod == nil {
		return &FaultError{Module: name, Kind: FaultNotLoaded, Err: errors.New("no such module")}
	}
	var g *generation
	for _, c := range []*generation{mod.prev.Load(), mod.cur.Load()} {
		if c != nil && c.num != faulted && c.acquire() {
			g = c
			break
		}
	}
	if g == nil {
		return &FaultError{Module: name, Kind: FaultNotLoaded, Err: ErrNoLastKnownGood}
	}
	defer g.release()
	buf := getBuf()
	*buf = req.MarshalAppend((*buf)[:0])
	start := time.Now()
	err := g.call(ctx, export, *buf, decode)
	putBuf(buf)
	c := Call{Module: name, Generation: g.num, Role: RoleLastKnownGood, Duration: time.Since(start)}
	if fe := faultOf(err); fe != nil {
		c.Fault, fe.Generation = fe.Kind, g.num
	}
	m.observe(c)
	return err
}

// DecideReleaseLastKnownGood asks name's last known good generation.
func (m *Manager) DecideReleaseLastKnownGood(ctx context.Context, name string, faulted uint64, req *abi.PolicyRequest) (*abi.PolicyResponse, error) {
	resp := new(abi.PolicyResponse)
	if err := m.lastKnownGoodCall(ctx, name, faulted, abi.ExportDecideRelease, req, policyDecoder(req, resp)); err != nil {
		return nil, err
	}
	return resp, nil
}

// AdaptRequestLastKnownGood asks name's last known good generation.
func (m *Manager) AdaptRequestLastKnownGood(ctx context.Context, name string, faulted uint64, req *abi.AdapterRequest) (*abi.AdapterResponse, error) {
	resp := new(abi.AdapterResponse)
	if err := m.lastKnownGoodCall(ctx, name, faulted, abi.ExportAdaptRequest, req, adapterDecoder(resp)); err != nil {
		return nil, err
	}
	return resp, nil
}

// ClassifyErrorLastKnownGood asks name's last known good generation.
func (m *Manager) ClassifyErrorLastKnownGood(ctx context.Context, name string, faulted uint64, req *abi.ClassifyRequest) (*abi.ClassifyResponse, error) {
	resp := new(abi.ClassifyResponse)
	if err := m.lastKnownGoodCall(ctx, name, faulted, abi.ExportClassifyError, req, classifyDecoder(resp)); err != nil {
		return nil, err
	}
	return resp, nil
}

// ErrCandidate wraps why Shadow refused a candidate (the caller's input).
var ErrCandidate = errors.New("shadow candidate refused")

// Shadow loads wasm as name's shadow candidate (`volhost module shadow`),
// through the same validation as a reload: manifest (manifestSrc, or the
// serving generation's when nil, without its sha256 pin, which names the
// serving file), maxima, compile, canary and self-test. It replaces any
// shadow candidate. Like the module directory, it is this agent's state:
// it lasts until a reload brings new files, or the agent restarts.
//
// A module listed in Options.Signed refuses it (ErrSignatureRequired):
// its candidates come through ShadowSigned.
func (m *Manager) Shadow(ctx context.Context, name string, wasm, manifestSrc []byte) (Status, error) {
	return m.shadow(ctx, name, wasm, manifestSrc, false)
}

// ShadowSigned is Shadow for a candidate whose signature its source
// verified against the module's key (plugins/source's Poller, before its
// Apply): the only way in for a module listed in Options.Signed.
func (m *Manager) ShadowSigned(ctx context.Context, name string, wasm, manifestSrc []byte) (Status, error) {
	return m.shadow(ctx, name, wasm, manifestSrc, true)
}

func (m *Manager) shadow(ctx context.Context, name string, wasm, manifestSrc []byte, signed bool) (Status, error) {
	if err := m.checkSigned(name, signed); err != nil {
		return Status{}, err
	}
	m.reloadMu.Lock()
	defer m.reloadMu.Unlock()
	mod, err := m.moduleLocked(name)
	if err != nil {
		return Status{}, err
	}
	cur := mod.cur.Load()
	if cur == nil {
		return Status{}, fmt.Errorf("module %s: %w: nothing serves to be shadowed", name, ErrCandidate)
	}
	if int64(len(wasm)) > m.opts.Maxima.ModuleSize {
		return Status{}, fmt.Errorf("%w: %d bytes, over module_limits.max_module_size (%d bytes)", ErrCandidate, len(wasm), m.opts.Maxima.ModuleSize)
	}
	var man *Manifest
	if manifestSrc == nil {
		c := *cur.man
		c.SHA256, c.Mode = "", ModeShadow
		man = &c
		manifestSrc = []byte("serving manifest of generation " + fmt.Sprint(cur.num))
	} else {
		var err error
		if man, err = ParseManifest(name+".hcl", manifestSrc); err != nil {
			return Status{}, fmt.Errorf("%w: %v", ErrCandidate, err)
		}
		if err := man.CheckMaxima(m.opts.Maxima); err != nil {
			return Status{}, fmt.Errorf("%w: manifest %s.hcl: %v", ErrCandidate, name, err)
		}
		if man.Kind != cur.man.Kind {
			return Status{}, fmt.Errorf("%w: a %s cannot shadow %s, a %s", ErrCandidate, man.Kind, name, cur.man.Kind)
		}
		man.Mode = ModeShadow
	}
	mod.mu.Lock()
	num := mod.loads + 1
	mod.mu.Unlock()
	g, err := loadGeneration(ctx, m.genDeps(), name, num, wasm, man)
	if err != nil {
		if ctx.Err() != nil {
			return Status{}, err
		}
		return Status{}, fmt.Errorf("%w: %v", ErrCandidate, err)
	}
	g.fp = fingerprint(wasm, manifestSrc)
	mod.mu.Lock()
	mod.loads = num
	mod.mu.Unlock()
	m.shadowLocked(mod, g)
	return mod.status(), nil
}
