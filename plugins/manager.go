package plugins

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jonboulle/clockwork"
	"github.com/tetratelabs/wazero"

	"github.com/volhost/volhost/abi"
)

// DefaultDebounce is how long Watch waits after the last change in the
// module directory before reloading: long enough for an editor or a copy to
// finish writing, short enough that an operator sees the swap at once.
const DefaultDebounce = 250 * time.Millisecond

// ErrClosed is returned by Reload and Watch after Close.
var ErrClosed = errors.New("plugins: manager closed")

// Options configure a Manager.
type Options struct {
	// Dir holds the modules: NAME.wasm beside its manifest NAME.hcl.
	Dir string
	// CacheDir is wazero's on-disk compilation cache, shared by all
	// modules and runs; "" compiles without a disk cache.
	CacheDir string
	// Logger is the parent logger; the manager logs under "plugins" and
	// each module under "plugins.NAME" with its version.
	Logger hclog.Logger
	// Clock drives the watch debounce and the breaker cool-down.
	Clock clockwork.Clock
	// Debounce is the quiet time Watch waits for (DefaultDebounce if 0).
	Debounce time.Duration
	// BreakerThreshold is the consecutive faults that open a module's
	// circuit (DefaultBreakerThreshold if 0).
	BreakerThreshold int
	// BreakerCooldown is how long an open circuit waits before letting one
	// trial call through (DefaultBreakerCooldown if 0).
	BreakerCooldown time.Duration
	// OnEvent, if set, is called for every module lifecycle event. It is
	// called synchronously (from reloads and from calls that trip a
	// breaker) and must not block.
	OnEvent func(Event)
	// OnSwap, if set, is called after a module's serving generation
	// changed (first load, swap, retirement), from the reload, so that
	// what the old generation decided is judged again at once. It must not
	// block.
	OnSwap func(Swap)
	// Maxima are the host's bounds on manifests and module files (zero
	// fields: the Default* maxima).
	Maxima Maxima
	// OnCall, if set, is told of every call on any generation (serving,
	// shadow, last known good), for per-generation metrics. It is called
	// on the call's goroutine and must not block.
	OnCall func(Call)
	// InitTimeout bounds an instance's set-up: instantiation, the start
	// function, _initialize and configure (DefaultInitTimeout if 0; at
	// least 10 call_timeouts either way).
	InitTimeout time.Duration
	// LoadLater: NewManager loads nothing and the caller runs the first
	// Reload. The agent does so once its API listens: compiling every
	// module without a warm cache takes seconds each, and an agent silent
	// for that long looked hung. Until then no module serves, and those
	// the Reload found show as loading.
	LoadLater bool
	// Signed names the modules that run only what a signed source
	// verified, each with a description of that source for refusals
	// (e.g. `module_source "policy" (registry/modules/policy:stable)`):
	// Shadow refuses their candidates, ShadowSigned takes them.
	Signed map[string]string
}

// Swap tells Options.OnSwap that a module's serving generation changed.
type Swap struct {
	Module     string
	Kind       abi.Kind
	Generation uint64 // the new serving generation; 0 once retired
	old, new   *Manifest
}

// Selects reports whether the generation before or after the swap selects
// t (Manifest.Selects): the volumes whose judgement the swap may change.
func (s Swap) Selects(t Target) bool {
	return (s.old != nil && s.old.Selects(t)) || (s.new != nil && s.new.Selects(t))
}

// EventKind names a module lifecycle event.
type EventKind string

// Module lifecycle events.
const (
	EventLoaded        EventKind = "loaded"         // first generation serving
	EventSwapped       EventKind = "swapped"        // a new generation replaced the serving one
	EventRefused       EventKind = "refused"        // a candidate failed validation (Reason)
	EventRetired       EventKind = "retired"        // its file was removed
	EventCircuitOpen   EventKind = "circuit-open"   // consecutive faults reached the threshold
	EventCircuitClosed EventKind = "circuit-closed" // a trial call succeeded, or a new generation
)

// Event is a module lifecycle event.
type Event struct {
	Kind       EventKind
	Module     string
	Generation uint64 // the generation concerned (serving one for circuit events)
	Version    string
	Reason     string // refusals and circuit openings: why
	Time       time.Time
	// Namespace and VolumeID name the volume a shadow disagreement, or
	// the fault that opened a circuit, was about ("" for module-wide
	// events): the reason may quote it.
	Namespace, VolumeID string
}

// Module states in Status.
const (
	StateServing     = "serving"
	StateLoading     = "loading" // the first generation is being compiled
	StateRefused     = "refused" // no good generation: the candidate was refused
	StateOpenCircuit = "open-circuit"
	StateRetired     = "retired"
)

// Status describes one module.
type Status struct {
	Name    string `json:"name"`
	Kind    string `json:"kind"`
	Version string `json:"version"`
	// ReportedVersion is the version the module itself reports, when it
	// differs from its manifest's (Version).
	ReportedVersion string `json:"reported_version,omitempty"`
	SHA256          string `json:"sha256"`
	// Generation counts the generations that have served under this name.
	Generation uint64 `json:"generation"`
	// State is loading, serving, refused, open-circuit or retired.
	State string `json:"state"`
	// Refusal is why the last candidate was refused ("" if it was not).
	Refusal string `json:"refusal,omitempty"`
	Calls   uint64 `json:"calls"`
	// Faults counts failed calls by FaultKind.
	Faults           map[string]uint64 `json:"faults,omitempty"`
	P50              time.Duration     `json:"p50_ns"`
	P99              time.Duration     `json:"p99_ns"`
	PoolSize         int               `json:"pool_size"`
	PoolIdle         int               `json:"pool_idle"`
	MemoryPages      uint32            `json:"memory_pages"`       // an instance's memory at its last check-in
	MemoryLimitPages uint32            `json:"memory_limit_pages"` // the manifest's cap
	PluginIDs        []string          `json:"plugin_ids,omitempty"`
	Volumes          []string          `json:"volumes,omitempty"`
	Default          bool              `json:"default"`
	// AdaptSteps are the steps a csi-adapter asked to adapt; empty: all.
	AdaptSteps []string `json:"adapt_steps,omitempty"`
	// OptionalExports are the optional exports the serving generation has
	// (ABI 1.1: volhost_confirm_fence), and ABI the version they add up to.
	OptionalExports []string `json:"optional_exports,omitempty"`
	ABI             string   `json:"abi,omitempty"`
	// Timeouts is how a call is stopped at its call_timeout: always
	// TimeoutsFlag (the module is instrumented). A module the host cannot
	// instrument is refused, never served under a weaker bound.
	Timeouts string `json:"timeouts,omitempty"`
	// TableLimit is the manifest's limits.table_elements.
	TableLimit uint32 `json:"table_limit,omitempty"`

	// Rollout and failure strategy.
	Mode      string `json:"mode,omitempty"`
	OnFailure string `json:"on_failure,omitempty"`
	// Promoted: the serving generation came in by `module promote`, and
	// is rolled back automatically if it faults past its rollback limit.
	Promoted bool `json:"promoted,omitempty"`
	// LastKnownGood is the previous generation, kept for rollback.
	LastKnownGood *GenerationInfo `json:"last_known_good,omitempty"`
	// Shadow is the candidate answering beside the serving generation.
	Shadow *ShadowStatus `json:"shadow,omitempty"`
	// RecentFaults are the serving generation's last faults, newest last.
	RecentFaults []RecentFault `json:"recent_faults,omitempty"`
	// BreakerOpen: calls are refused until the cool-down's trial call.
	BreakerOpen bool `json:"breaker_open"`
}

// TimeoutsFlag is the value of Status.Timeouts.
const TimeoutsFlag = "instrumented"

// Target is what a module is chosen for.
type Target struct {
	Namespace, VolumeID, PluginID string
}

// module is everything known under one name, across generations.
type module struct {
	name    string
	cur     atomic.Pointer[generation]
	breaker *breaker
	stats   stats
	// shadow is a candidate answering beside cur, never acting;
	// prev is the last known good generation: the one cur replaced, kept
	// loaded for `module rollback`, automatic rollback and on_failure =
	// "last_known_good".
	shadow atomic.Pointer[generation]
	prev   atomic.Pointer[generation]
	shadowStats

	mu        sync.Mutex // guards the fields below (written by reloads)
	state     string     // serving, refused or retired
	refusal   string
	gens      uint64 // number of the serving generation (the last that served)
	loads     uint64 // generations loaded (serving or shadow): the next one's number
	servingFP string // fingerprint (wasm+manifest) of the serving generation
	refusedFP string // fingerprint of the last refused (or rolled back) candidate
	shadowFP  string // fingerprint of the shadow candidate
	// recent are the last faults of the serving generation, for status.
	recent []RecentFault
}

// Manager loads the modules of a directory and runs calls on them.
// Its call methods are safe for concurrent use and never block on a reload.
type Manager struct {
	opts  Options
	log   hclog.Logger
	cache wazero.CompilationCache

	modules atomic.Pointer[map[string]*module] // replaced whole by reloads

	reloadMu sync.Mutex // serialises Reload and Close
	closed   bool       // guarded by reloadMu

	runtimes atomic.Int64 // open wazero runtimes, across all generations

	retiredMu sync.Mutex
	retired   []*generation // waiting to drain; Close waits for them

	// watchReady, if set (tests), is called once Watch sees the directory.
	watchReady func()
}

// NewManager creates a Manager and loads every module in opts.Dir. A broken
// module is refused (visible in Status), never fatal; only an unusable
// directory or cache is an error.
func NewManager(ctx context.Context, opts Options) (*Manager, error) {
	if opts.Dir == "" {
		return nil, errors.New("plugins: Options.Dir is empty")
	}
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	if opts.Clock == nil {
		opts.Clock = clockwork.NewRealClock()
	}
	if opts.Debounce <= 0 {
		opts.Debounce = DefaultDebounce
	}
	if opts.BreakerThreshold <= 0 {
		opts.BreakerThreshold = DefaultBreakerThreshold
	}
	if opts.BreakerCooldown <= 0 {
		opts.BreakerCooldown = DefaultBreakerCooldown
	}
	opts.Maxima = opts.Maxima.withDefaults()
	m := &Manager{opts: opts, log: opts.Logger.Named("plugins")}
	if opts.CacheDir != "" {
		if err := checkCacheDir(opts.CacheDir); err != nil {
			return nil, fmt.Errorf("plugins: compilation cache: %w", err)
		}
		c, err := wazero.NewCompilationCacheWithDir(opts.CacheDir)
		if err != nil {
			return nil, fmt.Errorf("plugins: compilation cache %s: %w", opts.CacheDir, err)
		}
		m.cache = c
	}
	empty := map[string]*module{}
	m.modules.Store(&empty)
	if opts.LoadLater {
		// The directory's modules show as loading from the start (one
		// directory read); an unreadable directory is an error now, as it
		// is for a load.
		names, err := m.moduleNames()
		if err != nil {
			m.closeCache()
			return nil, err
		}
		mods := map[string]*module{}
		m.addLoading(mods, names)
		m.modules.Store(&mods)
		return m, nil
	}
	if _, err := m.Reload(ctx); err != nil {
		m.closeCache()
		return nil, err
	}
	return m, nil
}

// Reload rescans the directory: new and changed modules are loaded beside
// the serving generation and swapped in once valid; a refused candidate
// leaves the last good one serving; removed modules retire. It returns the
// resulting statuses; the error is only for an unreadable directory.
func (m *Manager) Reload(ctx context.Context) ([]Status, error) {
	m.reloadMu.Lock()
	defer m.reloadMu.Unlock()
	if m.closed {
		return nil, ErrClosed
	}
	names, err := m.moduleNames()
	if err != nil {
		return nil, err
	}
	old := *m.modules.Load()
	next := make(map[string]*module, len(old)+len(names))
	for n, mod := range old {
		next[n] = mod
	}
	if m.addLoading(next, names) {
		// Shown at once as loading (Status): a first load of several
		// modules takes seconds each. Nothing calls or matches a module
		// with no serving generation.
		early := maps.Clone(next)
		m.modules.Store(&early)
	}
	if n := countLoading(next); n > 0 {
		m.log.Info("loading modules", "dir", m.opts.Dir, "count", n)
	}
	for _, n := range slices.Sorted(mapKeys(names)) {
		if err := ctx.Err(); err != nil {
			break // leave the rest for the next reload
		}
		m.reloadModuleLocked(ctx, next, next[n])
	}
	for n, mod := range next {
		if !names[n] {
			m.retireModuleLocked(mod)
		}
	}
	m.modules.Store(&next)
	return m.Status(), nil
}

// moduleNames are the modules the directory holds files of.
func (m *Manager) moduleNames() (map[string]bool, error) {
	entries, err := os.ReadDir(m.opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("plugins: module directory: %w", err)
	}
	names := map[string]bool{}
	for _, e := range entries {
		if n, ok := moduleName(e.Name()); ok {
			names[n] = true // any other type is refused by readModuleFile, visibly
		}
	}
	return names, nil
}

// addLoading adds to mods, as loading, each name it lacks, and reports
// whether it added any.
func (m *Manager) addLoading(mods map[string]*module, names map[string]bool) bool {
	added := false
	for n := range names {
		if mods[n] == nil {
			mods[n] = &module{name: n, state: StateLoading, breaker: newBreaker(m.opts.Clock, m.opts.BreakerThreshold, m.opts.BreakerCooldown)}
			added = true
		}
	}
	return added
}

// countLoading counts the modules of mods in their first load.
func countLoading(mods map[string]*module) int {
	n := 0
	for _, mod := range mods {
		mod.mu.Lock()
		if mod.state == StateLoading {
			n++
		}
		mod.mu.Unlock()
	}
	return n
}

// moduleName maps NAME.wasm and NAME.hcl to NAME.
func moduleName(file string) (string, bool) {
	for _, ext := range []string{".wasm", ".hcl"} {
		if n, ok := strings.CutSuffix(file, ext); ok && n != "" && !strings.HasPrefix(n, ".") {
			return n, true
		}
	}
	return "", false
}

func mapKeys[K comparable, V any](m map[K]V) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// reloadModuleLocked loads mod's files if they changed since the serving
// generation (or the last refused candidate). Called with reloadMu held.
func (m *Manager) reloadModuleLocked(ctx context.Context, next map[string]*module, mod *module) {
	wasmPath := filepath.Join(m.opts.Dir, mod.name+".wasm")
	hclPath := filepath.Join(m.opts.Dir, mod.name+".hcl")
	wasm, werr := readModuleFile(wasmPath, m.opts.Maxima.ModuleSize, "module_limits.max_module_size")
	src, herr := readModuleFile(hclPath, maxManifestSize, "the manifest bound")
	switch {
	case errors.Is(werr, fs.ErrNotExist):
		m.refuseLocked(mod, "", fmt.Sprintf("%s.hcl has no %s.wasm beside it", mod.name, mod.name))
		return
	case errors.Is(herr, fs.ErrNotExist):
		m.refuseLocked(mod, "", fmt.Sprintf("%s.wasm has no manifest %s.hcl beside it", mod.name, mod.name))
		return
	case werr != nil:
		m.refuseLocked(mod, "", werr.Error())
		return
	case herr != nil:
		m.refuseLocked(mod, "", herr.Error())
		return
	}
	fp := fingerprint(wasm, src)
	mod.mu.Lock()
	serving := fp == mod.servingFP && mod.cur.Load() != nil
	if serving && mod.refusal != "" {
		// The refused files were replaced by the serving ones again: the
		// refusal is history, and status must not show it any more.
		m.log.Info("module files match the serving generation again; refusal cleared", "module", mod.name)
		mod.refusal, mod.refusedFP, mod.state = "", "", StateServing
	}
	unchanged := serving || fp == mod.refusedFP || (fp == mod.shadowFP && mod.shadow.Load() != nil)
	num := mod.loads + 1
	mod.mu.Unlock()
	if unchanged {
		return
	}
	man, err := ParseManifest(filepath.Base(hclPath), src)
	if err != nil {
		m.refuseLocked(mod, fp, err.Error())
		return
	}
	if err := man.CheckMaxima(m.opts.Maxima); err != nil {
		m.refuseLocked(mod, fp, fmt.Sprintf("manifest %s.hcl: %v", mod.name, err))
		return
	}
	if other := m.otherDefaultLocked(next, mod.name, man); other != "" {
		// Not remembered as refused (fp ""): the other module may drop its
		// default, and then this one is tried again on the next reload.
		m.refuseLocked(mod, "", fmt.Sprintf("default = true, but %s module %s is the default already: one default per kind (set default = false on one)", man.Kind, other))
		return
	}
	start := time.Now()
	m.log.Info("module loading", "module", mod.name, "version", man.Version, "bytes", len(wasm))
	g, err := loadGeneration(ctx, m.genDeps(), mod.name, num, wasm, man)
	if err != nil {
		if ctx.Err() != nil {
			// Interrupted, not refused: the same files are tried again on
			// the next reload.
			m.log.Warn("module load interrupted", "module", mod.name, "error", err)
			return
		}
		m.refuseLocked(mod, fp, err.Error())
		return
	}
	g.fp = fp
	mod.mu.Lock()
	mod.loads = num
	mod.mu.Unlock()
	if man.Mode == ModeShadow {
		m.shadowLocked(mod, g)
		return
	}
	old := mod.cur.Swap(g)
	mod.mu.Lock()
	mod.state, mod.refusal, mod.gens, mod.servingFP, mod.refusedFP, mod.recent = StateServing, "", num, fp, "", nil
	mod.mu.Unlock()
	kind := EventLoaded
	var oldMan *Manifest
	if old != nil {
		kind, oldMan = EventSwapped, old.man
		if man.OnFailure == OnFailureLastKnownGood {
			m.keepLastKnownGood(mod, old)
		} else {
			// Kept loaded only where it may be asked (a runtime per
			// generation is memory): a promote keeps it too.
			m.retireGeneration(old)
			if p := mod.prev.Swap(nil); p != nil {
				m.retireGeneration(p)
			}
		}
	}
	m.log.Info("module serving", "module", mod.name, "version", g.version, "generation", num,
		"sha256", g.sha, "load_time", time.Since(start))
	m.emit(Event{Kind: kind, Module: mod.name, Generation: num, Version: g.version})
	if mod.breaker.reset() {
		m.emit(Event{Kind: EventCircuitClosed, Module: mod.name, Generation: num, Version: g.version,
			Reason: "new generation"})
	}
	m.notifySwap(Swap{Module: mod.name, Kind: man.Kind, Generation: num, old: oldMan, new: man})
}

func (m *Manager) genDeps() genDeps {
	return genDeps{cache: m.cache, log: m.log, initTimeout: m.opts.InitTimeout,
		onOpen: func() { m.runtimes.Add(1) }, onClose: func() { m.runtimes.Add(-1) }}
}

// notifySwap calls Options.OnSwap.
func (m *Manager) notifySwap(s Swap) {
	if m.opts.OnSwap != nil {
		m.opts.OnSwap(s)
	}
}

// otherDefaultLocked names another module of man's kind that serves with
// default = true, when man asks to be the default too: two defaults would
// leave the choice to name order, silently.
func (m *Manager) otherDefaultLocked(mods map[string]*module, self string, man *Manifest) string {
	if !man.Default {
		return ""
	}
	for _, n := range slices.Sorted(mapKeys(mods)) {
		if n == self {
			continue
		}
		if g := mods[n].cur.Load(); g != nil && g.man.Kind == man.Kind && g.man.Default {
			return n
		}
	}
	return ""
}

// maxManifestSize bounds NAME.hcl: a manifest is a few hundred bytes.
const maxManifestSize = 1 << 20

// readModuleFile reads a module's file without ever blocking or following
// a link: only a regular file, opened non-blocking (a FIFO named x.wasm
// would block a plain open until a writer came, and with it every reload),
// checked again on the open descriptor (it may have been replaced since
// the lstat), and at most max bytes (a bigger one is refused before it is
// read). Symbolic links are refused, dangling or not: the target would sit
// outside the watched directory, so its changes would go unseen (README
// "Policy and adapter modules").
func readModuleFile(path string, max int64, maxName string) ([]byte, error) {
	base := filepath.Base(path)
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, err
	}
	if err := checkModuleFile(path, base, fi, max, maxName); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", base, err)
	}
	defer f.Close()
	fi, err = f.Stat()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", base, err)
	}
	if err := checkModuleFile(path, base, fi, max, maxName); err != nil {
		return nil, err
	}
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", base, err)
	}
	if int64(len(b)) > max { // it grew after the stat
		return nil, fmt.Errorf("%s is over %s (%d bytes)", base, maxName, max)
	}
	return b, nil
}

// checkModuleFile refuses anything but a regular file of at most max bytes.
func checkModuleFile(path, base string, fi fs.FileInfo, max int64, maxName string) error {
	switch mode := fi.Mode(); {
	case mode&fs.ModeSymlink != 0:
		target, _ := os.Readlink(path)
		if _, err := os.Stat(path); err != nil {
			return fmt.Errorf("%s is a dangling symbolic link (to %q, which does not exist): symbolic links are refused, put the file itself in the module directory", base, target)
		}
		return fmt.Errorf("%s is a symbolic link (to %q): symbolic links are refused, put the file itself in the module directory", base, target)
	case !mode.IsRegular():
		return fmt.Errorf("%s is not a regular file (%s): refused", base, fileType(mode))
	case fi.Size() > max:
		return fmt.Errorf("%s is %d bytes, over %s (%d bytes)", base, fi.Size(), maxName, max)
	}
	return nil
}

func fileType(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeDevice != 0:
		return "a device"
	case m.IsDir():
		return "a directory"
	}
	return m.Type().String()
}

// fingerprint identifies a (wasm, manifest) pair.
func fingerprint(wasm, manifest []byte) string {
	h := sha256.New()
	ws := sha256.Sum256(wasm)
	h.Write(ws[:])
	h.Write(manifest)
	return hex.EncodeToString(h.Sum(nil))
}

// refuseLocked records a refused candidate; the serving generation (if
// any) keeps serving.
func (m *Manager) refuseLocked(mod *module, fp, reason string) {
	mod.mu.Lock()
	if fp == mod.refusedFP && mod.refusal == reason {
		mod.mu.Unlock()
		return
	}
	mod.refusal, mod.refusedFP = reason, fp
	if mod.cur.Load() == nil {
		mod.state = StateRefused
	}
	gen := mod.gens
	mod.mu.Unlock()
	m.log.Warn("module refused", "module", mod.name, "reason", reason)
	m.emit(Event{Kind: EventRefused, Module: mod.name, Generation: gen, Reason: reason})
}

// retireModuleLocked stops a module whose files were removed.
func (m *Manager) retireModuleLocked(mod *module) {
	mod.mu.Lock()
	if mod.state == StateRetired {
		mod.mu.Unlock()
		return
	}
	mod.state, mod.servingFP, mod.refusedFP = StateRetired, "", ""
	gen := mod.gens
	mod.mu.Unlock()
	g := mod.cur.Swap(nil)
	if g != nil {
		m.retireGeneration(g)
	}
	m.dropShadowAndPrev(mod)
	m.log.Info("module retired", "module", mod.name)
	m.emit(Event{Kind: EventRetired, Module: mod.name, Generation: gen})
	if g != nil {
		m.notifySwap(Swap{Module: mod.name, Kind: g.man.Kind, old: g.man})
	}
}

// retireGeneration retires g and remembers it until it has drained.
func (m *Manager) retireGeneration(g *generation) {
	m.retiredMu.Lock()
	kept := m.retired[:0]
	for _, r := range m.retired {
		select {
		case <-r.done:
		default:
			kept = append(kept, r)
		}
	}
	m.retired = append(kept, g)
	m.retiredMu.Unlock()
	g.retire()
}

func (m *Manager) emit(e Event) {
	if m.opts.OnEvent == nil {
		return
	}
	e.Time = m.opts.Clock.Now()
	m.opts.OnEvent(e)
}

// Close retires every module and waits (until ctx is done) for in-flight
// calls to finish and every runtime to close.
func (m *Manager) Close(ctx context.Context) error {
	m.reloadMu.Lock()
	if m.closed {
		m.reloadMu.Unlock()
		return nil
	}
	m.closed = true
	for _, mod := range *m.modules.Load() {
		if g := mod.cur.Swap(nil); g != nil {
			m.retireGeneration(g)
		}
		m.dropShadowAndPrev(mod)
	}
	m.reloadMu.Unlock()
	m.retiredMu.Lock()
	pending := slices.Clone(m.retired)
	m.retiredMu.Unlock()
	for _, g := range pending {
		select {
		case <-g.done:
		case <-ctx.Done():
			return fmt.Errorf("plugins: close: waiting for calls on %s generation %d: %w", g.name, g.num, ctx.Err())
		}
	}
	m.closeCache()
	return nil
}

func (m *Manager) closeCache() {
	if m.cache != nil {
		_ = m.cache.Close(context.Background())
	}
}

// Match picks the module of kind that serves t: a volume selector match
// beats a plugin ID match, which beats a default module; among equals the
// lexically first name wins, so the choice is stable.
func (m *Manager) Match(kind abi.Kind, t Target) (string, bool) {
	best, bestRank := "", 0
	for name, mod := range *m.modules.Load() {
		g := mod.cur.Load()
		if g == nil || g.man.Kind != kind {
			continue
		}
		rank := 0
		switch {
		case g.man.matchVolume(t.Namespace, t.VolumeID):
			rank = 3
		case t.PluginID != "" && g.man.matchPlugin(t.PluginID):
			rank = 2
		case g.man.Default:
			rank = 1
		}
		if rank > bestRank || (rank == bestRank && rank > 0 && name < best) {
			best, bestRank = name, rank
		}
	}
	return best, bestRank > 0
}

// DecideRelease asks a release-policy module to judge a volume's claims.
// The answer is validated: only claims of req, one decision each, known
// actions; anything else is a FaultBadOutput.
//
// Errors: a *FaultError for anything the module (or its absence, or its
// open circuit) caused; the caller's own ctx error, wrapped, when ctx ends
// first (not counted against the module). It blocks while all pool_size
// instances are busy, until one is free or ctx ends. The same holds for
// AdaptRequest and ClassifyError.
func (m *Manager) DecideRelease(ctx context.Context, module string, req *abi.PolicyRequest) (*abi.PolicyResponse, error) {
	resp := new(abi.PolicyResponse)
	_, err := m.call(ctx, module, abi.KindReleasePolicy, abi.ExportDecideRelease, req, policyDecoder(req, resp))
	shadowCompare(ctx, m, module, abi.ExportDecideRelease, req, resp, err, func(r *abi.PolicyResponse) func([]byte) (string, error) {
		return policyDecoder(req, r)
	})
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// AdaptRequest asks a csi-adapter module how a claim maps onto the
// driver's CSI request fields.
func (m *Manager) AdaptRequest(ctx context.Context, module string, req *abi.AdapterRequest) (*abi.AdapterResponse, error) {
	resp := new(abi.AdapterResponse)
	_, err := m.call(ctx, module, abi.KindCSIAdapter, abi.ExportAdaptRequest, req, adapterDecoder(resp))
	shadowCompare(ctx, m, module, abi.ExportAdaptRequest, req, resp, err, adapterDecoder)
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// AdaptsStep reports whether the csi-adapter module wants to be asked about
// step: false only when its serving generation declared adapt_steps without
// it, and the caller then builds the CSI spec's default request itself. An
// unknown or not-serving module answers true, so the call is made and fails
// with its own fault (fail closed).
func (m *Manager) AdaptsStep(module, step string) bool {
	mod := (*m.modules.Load())[module]
	if mod == nil {
		return true
	}
	g := mod.cur.Load()
	return g == nil || g.adapts(step)
}

// ClassifyError asks a csi-adapter module what a driver's error means.
func (m *Manager) ClassifyError(ctx context.Context, module string, req *abi.ClassifyRequest) (*abi.ClassifyResponse, error) {
	resp := new(abi.ClassifyResponse)
	_, err := m.call(ctx, module, abi.KindCSIAdapter, abi.ExportClassifyError, req, classifyDecoder(resp))
	shadowCompare(ctx, m, module, abi.ExportClassifyError, req, resp, err, classifyDecoder)
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// call runs one decision on the module's serving generation, with the
// breaker, stats and fault typing around it. It returns the generation
// number that answered (tests check that only good generations answer).
func (m *Manager) call(ctx context.Context, name string, kind abi.Kind, export string, req abi.Message, decode func([]byte) (string, error)) (uint64, error) {
	mod := (*m.modules.Load())[name]
	if mod == nil {
		return 0, &FaultError{Module: name, Kind: FaultNotLoaded, Err: errors.New("no such module")}
	}
	g := mod.acquire()
	if g == nil {
		mod.stats.record(0, FaultNotLoaded)
		return 0, &FaultError{Module: name, Kind: FaultNotLoaded, Err: errors.New("module is not serving")}
	}
	defer g.release()
	if g.man.Kind != kind {
		return 0, &FaultError{Module: name, Version: g.version, Kind: FaultNotLoaded,
			Err: fmt.Errorf("module is a %s, not a %s", g.man.Kind, kind)}
	}
	if !g.exports(export) { // an optional export (confirmfence.go) this generation lacks
		return 0, fmt.Errorf("module %s (version %s): %s: %w", name, g.version, export, ErrNotExported)
	}
	ok, probe := mod.breaker.allow()
	if !ok {
		m.autoRollback(mod, g, "automatically: its circuit is open")
		mod.stats.record(0, FaultOpenCircuit)
		return 0, &FaultError{Module: name, Version: g.version, Generation: g.num, Kind: FaultOpenCircuit,
			Err: errors.New("circuit open after consecutive faults")}
	}
	buf := getBuf()
	*buf = req.MarshalAppend((*buf)[:0])
	var err error
	if len(*buf) > maxMessage {
		err = fmt.Errorf("module %s: request of %d bytes is over the %d-byte limit", name, len(*buf), maxMessage)
	} else {
		start := time.Now()
		err = g.call(ctx, export, *buf, decode)
		elapsed := time.Since(start)
		switch fe := faultOf(err); {
		case err == nil:
			mod.stats.record(elapsed, "")
			m.observe(Call{Module: name, Generation: g.num, Role: RoleServing, Duration: elapsed})
		case fe != nil:
			mod.stats.record(elapsed, fe.Kind)
			m.observe(Call{Module: name, Generation: g.num, Role: RoleServing, Duration: elapsed, Fault: fe.Kind})
			m.noteFault(mod, g, fe, req)
		}
	}
	putBuf(buf)
	fe := faultOf(err)
	if fe != nil {
		fe.Generation = g.num
	}
	isFault := fe != nil && fe.Kind.countsForBreaker()
	if err != nil && !isFault {
		// The caller's own cancellation says nothing about the module:
		// release a probe slot without judging.
		if probe {
			mod.breaker.abandon()
		}
		return g.num, err
	}
	switch mod.breaker.done(probe, isFault) {
	case 1:
		m.log.Warn("circuit open", "module", name, "version", g.version, "last_fault", err)
		// The reason is the last fault's, which may quote its volume:
		// the event names that volume, so only its readers see it.
		ns, vol := requestVolume(req)
		m.emit(Event{Kind: EventCircuitOpen, Module: name, Generation: g.num, Version: g.version, Reason: err.Error(),
			Namespace: ns, VolumeID: vol})
		m.autoRollback(mod, g, "its circuit opened after consecutive faults")
	case -1:
		m.log.Info("circuit closed", "module", name, "version", g.version)
		m.emit(Event{Kind: EventCircuitClosed, Module: name, Generation: g.num, Version: g.version})
	}
	return g.num, err
}

// acquire returns the serving generation with a call reference held, or
// nil. A generation retired between the load and the acquire is skipped:
// the swap stored its successor first.
func (mod *module) acquire() *generation {
	for {
		g := mod.cur.Load()
		if g == nil {
			return nil
		}
		if g.acquire() {
			return g
		}
	}
}

// Status reports every module, sorted by name.
func (m *Manager) Status() []Status {
	mods := *m.modules.Load()
	out := make([]Status, 0, len(mods))
	for _, n := range slices.Sorted(mapKeys(mods)) {
		out = append(out, mods[n].status())
	}
	return out
}

// StatusOf reports one module.
func (m *Manager) StatusOf(name string) (Status, bool) {
	mod := (*m.modules.Load())[name]
	if mod == nil {
		return Status{}, false
	}
	return mod.status(), true
}

func (mod *module) status() Status {
	mod.mu.Lock()
	s := Status{Name: mod.name, State: mod.state, Refusal: mod.refusal, Generation: mod.gens,
		RecentFaults: slices.Clone(mod.recent)}
	mod.mu.Unlock()
	if g := mod.cur.Load(); g != nil {
		s.Kind, s.Version, s.SHA256 = string(g.man.Kind), g.version, g.sha
		s.ReportedVersion = g.reported
		s.PoolSize, s.PoolIdle = g.man.Limits.PoolSize, g.idleCount()
		s.MemoryPages, s.MemoryLimitPages = g.memPages.Load(), g.man.Limits.MemoryPages
		s.PluginIDs, s.Volumes, s.Default = slices.Clone(g.man.PluginIDs), slices.Clone(g.man.Volumes), g.man.Default
		s.AdaptSteps = slices.Clone(g.adaptSteps)
		s.OptionalExports, s.ABI = slices.Clone(g.optional), g.abiVersion()
		s.Timeouts, s.TableLimit = TimeoutsFlag, g.man.Limits.TableElements
		if s.State == StateServing && mod.breaker.isOpen() {
			s.State = StateOpenCircuit
		}
	}
	s.Calls, s.Faults, s.P50, s.P99 = mod.stats.snapshot()
	mod.rolloutStatus(&s)
	return s
}
