package plugins

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
	"github.com/tetratelabs/wazero/sys"

	"github.com/volhost/volhost/abi"
	"github.com/volhost/volhost/plugins/internal/wasmbin"
)

const (
	// maxMessage bounds a request or response crossing the boundary, like
	// the codec's own bound: a guest claiming a larger result is broken.
	maxMessage = 4 << 20
	// DefaultInitTimeout bounds instantiation, the start function,
	// _initialize and configure (Options.InitTimeout), which for a Go guest
	// take milliseconds, far more under -race (BenchmarkInstantiate): far
	// above a decision's call_timeout,
	// so they get their own, larger budget (at least 10 call_timeouts).
	DefaultInitTimeout = 5 * time.Second
	// pageSize is the wasm page size.
	pageSize = 65536
)

// generation is one loaded version of a module: its own wazero runtime
// (memory caps are per runtime), its compiled code and its instance pool.
// It is reference counted by in-flight calls and closed once it has been
// retired (replaced, removed or the manager closed) and the last call has
// returned, so a hot swap never interrupts a call.
type generation struct {
	name string
	num  uint64
	man  *Manifest
	sha  string
	fp   string // fingerprint of wasm + manifest (set before it serves)
	// promoted: it came in by Manager.Promote; faults counts its recent
	// faults against man.Rollback (rollout.go).
	promoted atomic.Bool
	faults   faultWindow
	version  string // the manifest's version, or the guest's own if unset
	// reported is the guest's own version when it differs from the
	// manifest's (which wins): shown, so a stale manifest is noticed.
	reported string
	log      hclog.Logger
	rt       wazero.Runtime
	compiled wazero.CompiledModule
	cfgReq   []byte // encoded ConfigureRequest, sent once per instance
	// adaptSteps are the steps a csi-adapter declared it changes (from the
	// canary's configure response); nil means every step.
	adaptSteps []string
	// optional are the optional exports (ABI 1.1, confirmfence.go) the
	// module has, resolved in every instance.
	optional []string
	// recyclePages: an instance whose memory grew past this is discarded
	// after its call, so a leaking guest is reset before it hits the cap.
	recyclePages uint32

	slots chan struct{} // one token per live, checked-out instance
	// idle holds the instances waiting for a call, used last-in first-out:
	// the instance that just answered is hot in the CPU caches, and under
	// light load a few instances serve every call instead of all of them in
	// turn, each keeping its guest heap and code warm only for itself.
	idleMu sync.Mutex
	idle   []*instance

	memPages atomic.Uint32 // memory size seen at the last check-in
	created  atomic.Int64  // instances created, the canary included
	recycled atomic.Int64  // instances discarded for max_calls or memory

	initTimeout time.Duration // see DefaultInitTimeout

	mu       sync.Mutex
	inflight int
	retired  bool
	closed   bool
	done     chan struct{} // closed once the runtime is closed
	onClose  func()
}

// instance is one instantiated module with its exports resolved.
type instance struct {
	mod    api.Module
	mem    api.Memory
	buffer api.Function
	fns    map[string]api.Function
	out    *tailBuffer
	stack  []uint64
	calls  int

	// flag is the instrumented module's preempt global. Setting it
	// non-zero makes the running call trap at its next function entry or
	// loop header. armed says a call is running that a late interrupt may
	// still stop; flagMu orders the interrupting goroutine against the
	// call's end.
	flag api.MutableGlobal
	// breach is set by the guest's table.grow guard just before it traps
	// (wasmbin.BreachTable), so the trap is reported as a table-limit fault.
	breach    api.Global
	flagMu    sync.Mutex
	armed     bool
	stopWatch func() bool // context.AfterFunc's stop, while armed by arm

	// The caller's context of decision calls (armTimer) is watched by one
	// context.AfterFunc kept across calls while their contexts share a
	// Done channel (the watcher's leadership context), instead of one
	// registered and stopped per call (3 allocations and the parent's
	// lock twice per call: TestDecideReleaseAllocs): interrupt only stops an armed call,
	// so a watch left registered between calls does nothing. watchDone is
	// the channel watched; unwatch ends it (close, and a generation's
	// close for its idle instances, so a long-lived context does not pin
	// a closed instance). Both are touched only by the instance's holder.
	watchDone <-chan struct{}
	watchStop func() bool
	// armedDone is the Done channel of the armed decision call's context
	// (under flagMu): a watch's function stops only a call on the context
	// it watches, so the function of a watch ended (or moved) just as its
	// context ended, still to run, cannot stop the next call, on another
	// context.
	armedDone <-chan struct{}

	// The call timeout of a decision call (armTimer): one timer per
	// instance instead of a context.WithTimeout and a context.AfterFunc on
	// it per call (CPU and allocations of every call's host side:
	// BenchmarkHostPath), and left pending between calls rather than reset
	// and stopped for each (the timer heap's locks were a large part of the
	// host side): a fire that finds the current call's deadline ahead re-arms it
	// for that deadline. deadline, expired, pending and fireAt are under
	// flagMu.
	timer    *time.Timer
	deadline time.Time
	expired  bool // the timer fired while the current call was armed
	// pending: the timer will fire, at fireAt or earlier; a call whose
	// deadline is before fireAt resets it.
	pending bool
	fireAt  time.Time
}

// genDeps is what a generation needs from its manager.
type genDeps struct {
	cache       wazero.CompilationCache
	initTimeout time.Duration
	log         hclog.Logger
	onOpen      func() // a runtime was created
	onClose     func() // a runtime was closed
}

// maxReservedPages bounds the memory reserved up front per instance (64 MiB).
const maxReservedPages = 1024

// reserveMemory reports whether an instance's linear memory is allocated at
// its cap when it is created. wazero otherwise grows it with append, copying
// the whole memory on each memory.grow; a Go guest grows its heap a page at
// a time for thousands of calls, and those copies made a young instance's
// calls costlier on average and its worst call much slower
// (BenchmarkYoungInstance). Reserving is cheap, as the Go runtime hands out large
// allocations as untouched zero pages, but it is capped so a manifest asking
// for 4 GiB does not reserve that per pooled instance. On Linux the memory is
// mapped outside the Go heap at its maximum instead, whatever the size
// (linearmem_linux.go); this capacity applies where that is not available.
func reserveMemory(pages uint32) bool { return pages <= maxReservedPages }

// loadGeneration builds and validates a candidate generation: sha256 pin,
// compile (through the disk cache), imports, exports, a canary instance
// (_initialize, ABI version, configure) and a self-test call. On any error
// everything it created is closed and the error says what was refused.
func loadGeneration(ctx context.Context, d genDeps, name string, num uint64, wasm []byte, man *Manifest) (*generation, error) {
	sum := sha256.Sum256(wasm)
	sha := hex.EncodeToString(sum[:])
	if man.SHA256 != "" && man.SHA256 != sha {
		// Not loaded: a pinned bundle forms a generation only once code and
		// manifest agree, so a swap half done (one file renamed in, the
		// other not yet) never serves a mixed pair.
		return nil, fmt.Errorf("sha256 of %s.wasm is %s, manifest pins %s: waiting for a %s.wasm and %s.hcl that agree", name, sha, man.SHA256, name, name)
	}
	if err := precheckImports(wasm); err != nil {
		return nil, err
	}
	g := &generation{
		name:        name,
		num:         num,
		man:         man,
		sha:         sha,
		version:     man.Version,
		slots:       make(chan struct{}, man.Limits.PoolSize),
		idle:        make([]*instance, 0, man.Limits.PoolSize),
		done:        make(chan struct{}),
		onClose:     d.onClose,
		initTimeout: cmp.Or(d.initTimeout, DefaultInitTimeout),
		// A quarter of the cap is left as headroom for the next request.
		recyclePages: man.Limits.MemoryPages - man.Limits.MemoryPages/4,
	}
	g.log = d.log.Named(name).With("module", name, "module_version", man.Version)
	ok := false
	defer func() {
		if !ok && g.rt != nil {
			g.retire()
		}
	}()
	if err := g.compile(ctx, d, wasm); err != nil {
		return nil, err
	}
	if err := validateImports(g.compiled); err != nil {
		return nil, err
	}
	if err := validateExports(g.compiled, man.Kind); err != nil {
		return nil, err
	}
	optional, err := detectOptionalExports(g.compiled, man.Kind)
	if err != nil {
		return nil, err
	}
	g.optional = optional
	g.cfgReq = (&abi.ConfigureRequest{ModuleName: name, Config: man.Config}).MarshalAppend(nil)

	canary, conf, err := g.newInstance(ctx, true)
	if err != nil {
		return nil, err
	}
	if g.adaptSteps, err = checkAdaptSteps(man.Kind, conf.AdaptSteps); err != nil {
		canary.close()
		return nil, err
	}
	if g.version == "" {
		g.version = conf.Version
		g.log = d.log.Named(name).With("module", name, "module_version", g.version)
	} else if conf.Version != "" && conf.Version != g.version {
		// The manifest's version names the generation; a module built
		// from other sources than the manifest says used to be shown as
		// the manifest's version with no word of it.
		g.reported = conf.Version
		g.log.Warn("the module reports another version than its manifest; the manifest's is shown",
			"manifest_version", g.version, "reported_version", conf.Version)
	}
	if err := g.selfTest(ctx, canary); err != nil {
		canary.close()
		return nil, fmt.Errorf("self-test: %w", err)
	}
	// The canary is a good instance: keep it as the pool's first.
	g.memPages.Store(canary.mem.Size() / pageSize)
	g.putIdle(canary)
	ok = true
	return g, nil
}

// instrument is wasmbin.Instrument with the Preempt probe and the
// manifest's table limit; tests replace it (BenchmarkGuestCost's
// loop-headers-only baseline).
var instrument = func(wasm []byte, tableLimit uint32) ([]byte, error) {
	p := wasmbin.Preempt
	p.TableLimit, p.DepthLimit = tableLimit, MaxCallDepth
	return wasmbin.Instrument(wasm, p)
}

// MaxCallDepth bounds how deeply a guest's calls nest. wazero's own bound is
// a 400 MB call stack, allocated on the Go heap as a recursion deepens (a
// guest recursing without a base case made the host allocate it in about
// 2.5 s); a Go guest's calls nest a few dozen deep.
const MaxCallDepth = 10000

// compile validates the module as it is, instruments it with
// wasmbin.Preempt and compiles the instrumented copy into the generation's
// new runtime. There is no other way in: a module that does not validate,
// that the instrumenter cannot read, or whose copy does not compile is
// refused with the reason, never served under a weaker bound than its
// manifest promises (RATIONALE "Call timeouts: the guest counts, the host
// flags").
func (g *generation) compile(ctx context.Context, d genDeps, wasm []byte) error {
	// The original first: the probe's globals are appended after the
	// module's own, so guest code naming a global past its own (invalid on
	// its own) would reach the host's budget in the copy.
	// Counts before wazero sees the bytes: its decoder allocates by them,
	// and an allocation past memory kills the agent, not the module.
	if err := wasmbin.CheckCounts(wasm); err != nil {
		return fmt.Errorf("%s.wasm is not a valid module: %w", g.name, err)
	}
	if err := wasmbin.CheckReadable(wasm); err != nil {
		return fmt.Errorf("%s.wasm: %w", g.name, err)
	}
	if err := validateModule(ctx, wasm, g.man.Limits.MemoryPages); err != nil {
		return fmt.Errorf("%s.wasm is not a valid module: %w", g.name, err)
	}
	instrumented, err := instrument(wasm, g.man.Limits.TableElements)
	if err != nil {
		var le *wasmbin.LimitError
		if errors.As(err, &le) {
			return fmt.Errorf("%s.wasm: %w", g.name, err)
		}
		return fmt.Errorf("%s.wasm cannot be instrumented, so its calls could not be stopped at call_timeout: %w", g.name, err)
	}
	if err := g.compileIn(ctx, d, instrumented); err != nil {
		return fmt.Errorf("compile %s.wasm (instrumented): %w", g.name, err)
	}
	return nil
}

// validateModule compiles wasm with wazero's interpreter, which decodes
// and validates it as the compiler would at a fraction of the cost (about
// 0.15 s for a 3 MB Go guest against 1.5 s), with the manifest's memory cap
// so an initial memory above it is refused here.
func validateModule(ctx context.Context, wasm []byte, memoryPages uint32) error {
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter().WithMemoryLimitPages(memoryPages))
	defer rt.Close(context.Background())
	_, err := compileModule(ctx, rt, wasm)
	return err
}

// compileIn creates the generation's runtime with the host modules, and
// compiles code into it. Calls are stopped by the instrumented flag, so
// wazero's close-on-context-done (a call into Go at every loop header) is
// off.
func (g *generation) compileIn(ctx context.Context, d genDeps, code []byte) error {
	cfg := wazero.NewRuntimeConfig().
		WithMemoryLimitPages(g.man.Limits.MemoryPages).
		WithCloseOnContextDone(false).
		WithMemoryCapacityFromMax(reserveMemory(g.man.Limits.MemoryPages))
	if d.cache != nil {
		cfg = cfg.WithCompilationCache(d.cache)
	}
	g.rt = wazero.NewRuntimeWithConfig(ctx, cfg)
	if d.onOpen != nil {
		d.onOpen()
	}
	if err := instantiateHostModules(ctx, g.rt, g.log); err != nil {
		return err
	}
	compiled, err := compileModule(ctx, g.rt, code)
	if err != nil {
		return err
	}
	g.compiled = compiled
	return nil
}

// compileModule is rt.CompileModule with a panic inside wazero turned into
// an error: wazero v1.12.0's validator panics on some malformed binaries
// (testdata/modules/wazero-validator-panic.wasm, found by FuzzInstrument),
// and a file in the module directory must never take the agent down.
func compileModule(ctx context.Context, rt wazero.Runtime, code []byte) (c wazero.CompiledModule, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("wazero panicked validating the module: %v", r)
		}
	}()
	return rt.CompileModule(ctx, code)
}

// newInstance instantiates the compiled module, runs _initialize, checks
// the ABI version (for the canary) and configures it. It also returns the
// guest's ConfigureResponse (its own version string, its adapt steps).
func (g *generation) newInstance(ctx context.Context, checkVersion bool) (*instance, *abi.ConfigureResponse, error) {
	out := &tailBuffer{}
	timeout := max(g.initTimeout, 10*g.man.Limits.CallTimeout)
	ictx, cancel := context.WithTimeout(context.WithValue(ctx, initDeadline{}, timeout), timeout)
	defer cancel()
	// The instance's linear memory is mapped outside the Go heap
	// (linearmem_linux.go); the context carries the allocator to wazero.
	ictx = experimental.WithMemoryAllocator(ictx, linearMemoryAllocator)
	// No args, no env, no FS: the zero ModuleConfig grants none. Stdout and
	// stderr go to a bounded tail attached to fault errors. The name is
	// empty so one runtime can hold the whole pool.
	mod, err := g.rt.InstantiateModule(ictx, g.compiled, wazero.NewModuleConfig().
		WithName("").
		WithStartFunctions().
		WithStdout(out).
		WithStderr(out))
	if err != nil {
		return nil, nil, g.fault(ctx, ictx, err, out, nil, "instantiate")
	}
	inst := &instance{
		mod:    mod,
		mem:    mod.Memory(),
		buffer: mod.ExportedFunction(abi.ExportBuffer),
		fns:    make(map[string]api.Function, 3),
		out:    out,
		stack:  make([]uint64, 1),
	}
	for name := range requiredExports(g.man.Kind) {
		inst.fns[name] = mod.ExportedFunction(name)
	}
	for _, name := range g.optional {
		inst.fns[name] = mod.ExportedFunction(name)
	}
	inst.flag, _ = mod.ExportedGlobal(wasmbin.PreemptExport).(api.MutableGlobal)
	inst.breach = mod.ExportedGlobal(wasmbin.BreachExport)
	if inst.flag == nil || inst.breach == nil { // Instrument adds them: this is the host's bug
		inst.close()
		return nil, nil, fmt.Errorf("instrumented module exports no mutable %s and %s", wasmbin.PreemptExport, wasmbin.BreachExport)
	}
	if inst.mem == nil {
		inst.close()
		return nil, nil, &FaultError{Module: g.name, Version: g.version, Kind: FaultABI, Err: errors.New("module has no memory")}
	}
	// The module's start section, moved out of instantiation by the
	// instrumenter so that it runs armed, like any call: it comes first.
	if start := mod.ExportedFunction(wasmbin.StartExport); start != nil {
		if err := inst.run(ictx, start, nil); err != nil {
			inst.close()
			return nil, nil, g.fault(ctx, ictx, err, out, inst, "start function")
		}
	}
	if init := mod.ExportedFunction(abi.ExportInitialize); init != nil {
		if err := inst.run(ictx, init, nil); err != nil {
			inst.close()
			return nil, nil, g.fault(ctx, ictx, err, out, inst, abi.ExportInitialize)
		}
	}
	if checkVersion {
		res := make([]uint64, 1)
		if err := inst.run(ictx, inst.fns[abi.ExportVersion], res); err != nil {
			inst.close()
			return nil, nil, g.fault(ctx, ictx, err, out, inst, abi.ExportVersion)
		}
		if v := api.DecodeI32(res[0]); v != abi.Version {
			inst.close()
			return nil, nil, fmt.Errorf("module speaks ABI v%d, host speaks v%d", v, abi.Version)
		}
	}
	var resp abi.ConfigureResponse
	err = g.invokeOn(ictx, ctx, inst, abi.ExportConfigure, g.cfgReq, func(b []byte) (string, error) {
		if err := resp.Unmarshal(b); err != nil {
			return "", err
		}
		return resp.Error, nil
	})
	if err != nil {
		inst.close()
		return nil, nil, fmt.Errorf("configure: %w", err)
	}
	g.created.Add(1)
	return inst, &resp, nil
}

// checkAdaptSteps validates the steps a module declared in its configure
// response: a misspelt step would otherwise silently never reach the module.
func checkAdaptSteps(kind abi.Kind, steps []string) ([]string, error) {
	if len(steps) == 0 {
		return nil, nil
	}
	if kind != abi.KindCSIAdapter {
		return nil, fmt.Errorf("configure: adapt_steps %q declared by a %s module; only a %s adapts steps", steps, kind, abi.KindCSIAdapter)
	}
	for _, s := range steps {
		if !slices.Contains(abi.AdapterSteps, s) {
			return nil, fmt.Errorf("configure: adapt_steps names unknown step %q (known: %s)", s, strings.Join(abi.AdapterSteps, ", "))
		}
	}
	return slices.Clone(steps), nil
}

// adapts reports whether volhost_adapt_request is asked for step.
func (g *generation) adapts(step string) bool {
	return g.adaptSteps == nil || slices.Contains(g.adaptSteps, step)
}

// run calls fn on the instance with stack (params in, results out), bounded
// by ctx (see arm).
func (inst *instance) run(ctx context.Context, fn api.Function, stack []uint64) error {
	if err := inst.arm(ctx); err != nil {
		return err
	}
	defer inst.disarm()
	return fn.CallWithStack(ctx, stack)
}

// arm makes ctx's end stop the instance's calls until disarm: the
// instance is stopped by its flag, set from context.AfterFunc.
func (inst *instance) arm(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	inst.flagMu.Lock()
	inst.armed = true
	inst.flagMu.Unlock()
	inst.stopWatch = context.AfterFunc(ctx, inst.interrupt)
	return nil
}

// disarm ends what arm started. An interrupt that lost the race with the
// call's end must not stop the instance's next call, so the flag is cleared
// if it was set.
func (inst *instance) disarm() {
	inst.stopWatch()
	inst.stopWatch = nil
	inst.unarm()
}

// unarm ends the armed state and clears a flag an interrupt set too late.
func (inst *instance) unarm() {
	inst.flagMu.Lock()
	inst.armed = false
	inst.armedDone = nil
	if inst.flag.Get() != 0 {
		inst.flag.Set(0)
	}
	inst.flagMu.Unlock()
}

// interrupt stops the instance's running call at its next function entry
// or loop header. The guest only reads the flag; the write is ordered with
// run's reset by flagMu.
func (inst *instance) interrupt() {
	inst.flagMu.Lock()
	if inst.armed {
		inst.flag.Set(1)
	}
	inst.flagMu.Unlock()
}

// interruptFor is interrupt for the watch of a decision call's context
// (armTimer): it stops the armed call only when that call runs on the
// context whose Done channel is done.
func (inst *instance) interruptFor(done <-chan struct{}) {
	inst.flagMu.Lock()
	if inst.armed && inst.armedDone == done {
		inst.flag.Set(1)
	}
	inst.flagMu.Unlock()
}

// interrupted reports whether the host has set the flag of the running
// call (read under flagMu: the interrupt writes it from another goroutine).
func (inst *instance) interrupted() bool {
	if inst.flag == nil {
		return false
	}
	inst.flagMu.Lock()
	defer inst.flagMu.Unlock()
	return inst.flag.Get() != 0
}

// armTimer is arm for a decision call: the instance's own timer stops the
// call timeout after it starts, and the caller's ctx ending stops it too.
// The timer is only reset when none is pending by the call's deadline; a
// fire left over from an earlier call is told apart by the deadline it
// finds, and re-arms the timer for it (expire).
func (inst *instance) armTimer(ctx context.Context, timeout time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	now := time.Now()
	inst.flagMu.Lock()
	inst.armed = true
	inst.armedDone = ctx.Done()
	inst.expired = false
	inst.deadline = now.Add(timeout)
	if !inst.pending || inst.fireAt.After(inst.deadline) {
		inst.pending, inst.fireAt = true, inst.deadline
		if inst.timer == nil {
			inst.timer = time.AfterFunc(timeout, inst.expire)
		} else {
			inst.timer.Reset(timeout)
		}
	}
	inst.flagMu.Unlock()
	// context.Background() never ends: nothing to watch.
	if done := ctx.Done(); done != nil && done != inst.watchDone {
		inst.unwatch()
		inst.watchDone, inst.watchStop = done, context.AfterFunc(ctx, func() { inst.interruptFor(done) })
		return nil
	}
	// A kept watch fired before armed was set found nothing to stop; ctx
	// ends (Err) before its AfterFunc runs, so this check, after armed
	// was set, sees every end the watch missed.
	if err := ctx.Err(); err != nil {
		inst.unarm()
		return err
	}
	return nil
}

// disarmTimer ends what armTimer started, as disarm does, except that the
// watch of the caller's context is kept for the next call (see watchDone).
// The timer stays pending: it fires once after the instance's last call,
// finds nothing armed and is not re-armed.
func (inst *instance) disarmTimer() {
	inst.unarm()
}

// unwatch ends the watch of a decision call's context, if any.
func (inst *instance) unwatch() {
	if inst.watchStop != nil {
		inst.watchStop()
		inst.watchDone, inst.watchStop = nil, nil
	}
}

// expire is the timer's function: it stops the armed call once its
// deadline has passed, and otherwise re-arms itself for the armed call's
// deadline (the timer was set for an earlier call's, or a Reset for a
// later call still ran the function of an earlier fire).
func (inst *instance) expire() {
	inst.flagMu.Lock()
	defer inst.flagMu.Unlock()
	inst.pending = false
	if !inst.armed {
		return
	}
	now := time.Now()
	if !now.Before(inst.deadline) {
		inst.expired = true
		inst.flag.Set(1)
		return
	}
	inst.pending, inst.fireAt = true, inst.deadline
	inst.timer.Reset(inst.deadline.Sub(now))
}

// timerBound is an instance's armTimer deadline seen as the call's bound
// (fault reads it): DeadlineExceeded once the timer fired.
type timerBound instance

func (b *timerBound) Err() error {
	inst := (*instance)(b)
	inst.flagMu.Lock()
	defer inst.flagMu.Unlock()
	if inst.expired {
		return context.DeadlineExceeded
	}
	return nil
}

func (b *timerBound) Value(any) any { return nil }

// callBound is what fault needs of the bound a call ran under: a context
// (set-up, the self-test) or an instance's timer (decision calls).
type callBound interface {
	Err() error
	Value(key any) any
}

func (inst *instance) close() {
	if inst.timer != nil {
		inst.timer.Stop()
	}
	inst.unwatch()
	_ = inst.mod.Close(context.Background())
}

// acquire takes a reference for one call; false once the generation is
// retired (the caller then reloads the module's current generation).
func (g *generation) acquire() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.retired {
		return false
	}
	g.inflight++
	return true
}

// release drops a call's reference, closing a drained retired generation.
func (g *generation) release() {
	g.mu.Lock()
	g.inflight--
	closeNow := g.retired && g.inflight == 0 && !g.closed
	if closeNow {
		g.closed = true
	}
	g.mu.Unlock()
	if closeNow {
		g.closeRuntime()
	}
}

// retire stops new calls; the runtime closes now if nothing is in flight,
// else when the last call releases.
func (g *generation) retire() {
	g.mu.Lock()
	g.retired = true
	closeNow := g.inflight == 0 && !g.closed
	if closeNow {
		g.closed = true
	}
	g.mu.Unlock()
	if closeNow {
		g.closeRuntime()
	}
}

func (g *generation) closeRuntime() {
	g.closeRuntimeOnly()
	close(g.done)
}

// unwatchIdle ends the caller-context watch of every idle instance
// (instance.watchDone).
func (g *generation) unwatchIdle() {
	g.idleMu.Lock()
	defer g.idleMu.Unlock()
	for _, inst := range g.idle {
		inst.unwatch()
	}
}

// closeRuntimeOnly closes the wazero runtime, which closes every instance,
// WASI and the host module, and reports it to the manager.
func (g *generation) closeRuntimeOnly() {
	// No call is in flight (or the runtime is being torn down): the
	// idle instances' watches must not keep them reachable from a
	// long-lived caller context.
	g.unwatchIdle()
	if err := g.rt.Close(context.Background()); err != nil {
		g.log.Warn("closing runtime", "generation", g.num, "error", err)
	}
	if g.onClose != nil {
		g.onClose()
	}
}

// checkout takes an instance from the pool, creating one lazily while the
// pool is below pool_size, or waits for one until ctx is done.
func (g *generation) checkout(ctx context.Context) (*instance, error) {
	select {
	case g.slots <- struct{}{}:
	default:
		select {
		case g.slots <- struct{}{}:
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for a %s instance: %w", g.name, ctx.Err())
		}
	}
	if inst := g.takeIdle(); inst != nil {
		return inst, nil
	}
	inst, _, err := g.newInstance(ctx, false)
	if err != nil {
		<-g.slots
		return nil, err
	}
	return inst, nil
}

// takeIdle pops the most recently used idle instance, or returns nil.
func (g *generation) takeIdle() *instance {
	g.idleMu.Lock()
	defer g.idleMu.Unlock()
	n := len(g.idle)
	if n == 0 {
		return nil
	}
	inst := g.idle[n-1]
	g.idle[n-1] = nil
	g.idle = g.idle[:n-1]
	return inst
}

// putIdle pushes an instance for the next call; the caller holds its slot,
// so idle never exceeds pool_size.
func (g *generation) putIdle(inst *instance) {
	g.idleMu.Lock()
	g.idle = append(g.idle, inst)
	g.idleMu.Unlock()
}

// idleCount is the number of idle instances.
func (g *generation) idleCount() int {
	g.idleMu.Lock()
	defer g.idleMu.Unlock()
	return len(g.idle)
}

// checkin returns an instance to the pool, or discards it.
func (g *generation) checkin(inst *instance, discard bool) {
	inst.calls++
	if !discard {
		pages := inst.mem.Size() / pageSize
		g.memPages.Store(pages)
		switch {
		case inst.calls >= g.man.Limits.MaxCalls:
			discard = true
		case pages > g.recyclePages:
			g.log.Debug("recycling instance above memory threshold", "pages", pages, "threshold", g.recyclePages)
			discard = true
		}
		if discard {
			g.recycled.Add(1)
		}
	}
	if discard {
		inst.close()
	} else {
		g.putIdle(inst)
	}
	<-g.slots
}

// call runs one export on a pooled instance. decode parses the response
// (still inside the host's copy) and returns the guest's Error string.
func (g *generation) call(ctx context.Context, export string, req []byte, decode func([]byte) (string, error)) error {
	inst, err := g.checkout(ctx)
	if err != nil {
		return err
	}
	err = g.invokeTimed(ctx, inst, export, req, decode)
	discard := false
	if fe := faultOf(err); fe != nil {
		switch fe.Kind {
		case FaultTrap, FaultTimeout, FaultOOM, FaultTableLimit, FaultABI:
			discard = true
		}
	} else if err != nil {
		discard = true // the caller gave up mid-call: wazero closed the instance
	}
	g.checkin(inst, discard)
	return err
}

// invokeOn writes req into the guest's buffer, calls export with cctx (the
// call's deadline) and decodes the packed result. parent is the caller's
// own context, used to tell its cancellation from the module's timeout.
func (g *generation) invokeOn(cctx, parent context.Context, inst *instance, export string, req []byte, decode func([]byte) (string, error)) error {
	inst.out.Reset()
	// One arming covers both calls: the deadline is the request's.
	if err := inst.arm(cctx); err != nil {
		return g.fault(parent, cctx, err, inst.out, inst, abi.ExportBuffer)
	}
	defer inst.disarm()
	return g.exchange(cctx, parent, cctx, inst, export, req, decode)
}

// invokeTimed is invokeOn for a decision call: bounded by call_timeout on
// the instance's timer (armTimer) and by ctx, the caller's.
func (g *generation) invokeTimed(ctx context.Context, inst *instance, export string, req []byte, decode func([]byte) (string, error)) error {
	inst.out.Reset()
	if err := inst.armTimer(ctx, g.man.Limits.CallTimeout); err != nil {
		return g.fault(ctx, ctx, err, inst.out, inst, abi.ExportBuffer)
	}
	defer inst.disarmTimer()
	return g.exchange(ctx, ctx, (*timerBound)(inst), inst, export, req, decode)
}

// exchange is one armed request and response: volhost_buffer, the write,
// the export, the checked read and decode. ctx goes to wazero (and so to
// the host functions the guest calls); bound is what stops the call.
func (g *generation) exchange(ctx, parent context.Context, bound callBound, inst *instance, export string, req []byte, decode func([]byte) (string, error)) error {
	inst.stack[0] = api.EncodeU32(uint32(len(req)))
	if err := inst.buffer.CallWithStack(ctx, inst.stack); err != nil {
		return g.fault(parent, bound, err, inst.out, inst, abi.ExportBuffer)
	}
	ptr := api.DecodeU32(inst.stack[0])
	// Address 0 is how a guest says it has no buffer (ABI.md "Memory");
	// writing there would corrupt the guest's own data.
	if ptr == 0 || !inst.mem.Write(ptr, req) {
		return g.abiFault(inst, fmt.Errorf("%s(%d) returned %#x: outside the guest's %d-byte memory", abi.ExportBuffer, len(req), ptr, inst.mem.Size()))
	}
	inst.stack[0] = api.EncodeU32(uint32(len(req)))
	if err := inst.fns[export].CallWithStack(ctx, inst.stack); err != nil {
		return g.fault(parent, bound, err, inst.out, inst, export)
	}
	rptr, rlen := abi.UnpackResult(inst.stack[0])
	if rlen > maxMessage {
		return g.abiFault(inst, fmt.Errorf("%s returned a %d-byte result, over the %d-byte limit", export, rlen, maxMessage))
	}
	var view []byte
	ok := true
	if rlen > 0 { // ABI.md: with len 0 the response is empty and ptr is ignored
		view, ok = inst.mem.Read(rptr, rlen)
	}
	if !ok {
		return g.abiFault(inst, fmt.Errorf("%s returned [%#x, +%d): outside the guest's %d-byte memory", export, rptr, rlen, inst.mem.Size()))
	}
	// Decoded in place: the view aliases guest memory, which nothing
	// writes while the host holds the instance between two calls, and the
	// codec copies what it keeps (one string of the whole message,
	// abi.newDecoder), so a second copy first would only cost.
	guestErr, err := decode(view)
	if err != nil {
		return &FaultError{Module: g.name, Version: g.version, Kind: FaultBadOutput,
			Err: fmt.Errorf("%s: %w", export, err), Output: inst.out.String()}
	}
	if guestErr != "" {
		return &FaultError{Module: g.name, Version: g.version, Kind: FaultGuestError,
			Err: errors.New(guestErr), Output: inst.out.String()}
	}
	return nil
}

func (g *generation) abiFault(inst *instance, err error) error {
	return &FaultError{Module: g.name, Version: g.version, Kind: FaultABI, Err: err, Output: inst.out.String()}
}

// fault maps a wazero call error to a FaultError. A cancelled caller is
// not the module's fault: that returns the context's error, uncounted.
//
// wazero has no typed error for traps, so the kind is read from what is
// typed (sys.ExitError's deadline code, the contexts) and from the guest's
// state: Go's runtime reports a failed memory.grow only by throwing (an
// `unreachable` trap after printing "fatal error: out of memory"), so a trap
// with the guest's memory at the cap, or with that text in its output, is
// an out-of-memory fault.
func (g *generation) fault(parent context.Context, cctx callBound, err error, out *tailBuffer, inst *instance, what string) error {
	if parent.Err() != nil {
		return fmt.Errorf("module %s: %s: %w", g.name, what, parent.Err())
	}
	output := out.String()
	kind := FaultTrap
	var mem api.Memory
	if inst != nil {
		mem = inst.mem
	}
	var exit *sys.ExitError
	lim := g.man.Limits
	// The host's flag still set: the trap is the probe's, at the deadline
	// (fault runs before disarm clears it). A guest merely sitting at its
	// memory cap when stopped has not run out of memory.
	interrupted := inst != nil && inst.interrupted() && cctx.Err() != nil
	switch {
	case inst != nil && inst.breach != nil && uint32(inst.breach.Get()) == wasmbin.BreachTable:
		kind = FaultTableLimit
		err = fmt.Errorf("a table.grow past limits.table_elements = %d: %w", lim.TableElements, err)
	case inst != nil && inst.breach != nil && uint32(inst.breach.Get()) == wasmbin.BreachDepth:
		err = fmt.Errorf("calls nested past the host's limit of %d: %w", MaxCallDepth, err)
	// Out of memory before timeout: a Go guest dying of it can spend long
	// enough printing its goroutine dump to also hit the deadline.
	case strings.Contains(output, "out of memory"),
		mem != nil && g.nearCap(mem) && !interrupted:
		kind = FaultOOM
		err = fmt.Errorf("memory at %d of limits.memory_pages = %d: %w", memPages(mem), lim.MemoryPages, err)
	case interrupted, errors.As(err, &exit) && exit.ExitCode() == sys.ExitCodeDeadlineExceeded,
		errors.Is(cctx.Err(), context.DeadlineExceeded):
		kind = FaultTimeout
		if d, ok := cctx.Value(initDeadline{}).(time.Duration); ok {
			err = fmt.Errorf("ran past the %s deadline of an instance's set-up (start, %s, configure): %w", d, abi.ExportInitialize, err)
		} else {
			err = fmt.Errorf("ran past limits.call_timeout = %s: %w", lim.CallTimeout, err)
		}
	}
	return &FaultError{Module: g.name, Version: g.version, Kind: kind,
		Err: fmt.Errorf("%s: %w", what, err), Output: output}
}

func memPages(mem api.Memory) uint32 { return mem.Size() / pageSize }

// initDeadline marks the context of an instance's set-up, carrying its
// timeout, so a timeout there names that deadline, not call_timeout.
type initDeadline struct{}

// nearCap reports whether memory is within 1/8 of the manifest's cap: a Go
// heap grows in steps of at least 4 MiB (64 pages) near the top, so a failed
// grow leaves the memory short of the cap by less than one step.
func (g *generation) nearCap(mem api.Memory) bool {
	limit := g.man.Limits.MemoryPages
	margin := max(limit/8, min(64, limit/2))
	return mem.Size()/pageSize+margin >= limit
}

// bufPool recycles the host-side copies of guest responses.
var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

func getBuf() *[]byte { return bufPool.Get().(*[]byte) }

func putBuf(b *[]byte) {
	if cap(*b) <= 64<<10 { // do not pin huge buffers
		bufPool.Put(b)
	}
}
