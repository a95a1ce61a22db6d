package kit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/volhost/volhost/abi"
	"github.com/volhost/volhost/plugins"
)

// Module is one module loaded offline, the way the agent loads it: the same
// plugins.Manager, so a module the agent would refuse is refused here with
// the same reason, and its calls run under its manifest's limits.
type Module struct {
	Name    string
	Kind    abi.Kind
	Version string
	m       *plugins.Manager
	dir     string
}

// LoadOptions configure Load.
type LoadOptions struct {
	// Manifest is the module's manifest; "" means NAME.hcl beside the wasm.
	Manifest string
	// CacheDir is wazero's compilation cache ("" compiles every time).
	CacheDir string
	// Logger receives the module's log lines (none if nil).
	Logger hclog.Logger
}

// ErrRefused is wrapped by Load's error when the host refused the module.
var ErrRefused = errors.New("module refused")

// Load reads wasmPath and its manifest into a private directory and loads
// them there through plugins.NewManager.
func Load(ctx context.Context, wasmPath string, o LoadOptions) (*Module, error) {
	name, ok := strings.CutSuffix(filepath.Base(wasmPath), ".wasm")
	if !ok || name == "" {
		return nil, fmt.Errorf("%s: a module file is NAME.wasm", wasmPath)
	}
	manifest := o.Manifest
	if manifest == "" {
		manifest = filepath.Join(filepath.Dir(wasmPath), name+".hcl")
	}
	wasm, err := os.ReadFile(wasmPath)
	if err != nil {
		return nil, fmt.Errorf("module: %w", err)
	}
	src, err := os.ReadFile(manifest)
	if err != nil {
		return nil, fmt.Errorf("manifest: %w (pass -manifest FILE when it is not NAME.hcl beside the module)", err)
	}
	man, err := plugins.ParseManifest(filepath.Base(manifest), src)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "volhost-kit-")
	if err != nil {
		return nil, err
	}
	for file, b := range map[string][]byte{name + ".wasm": wasm, name + ".hcl": src} {
		if err := os.WriteFile(filepath.Join(dir, file), b, 0o600); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	log := o.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	m, err := plugins.NewManager(ctx, plugins.Options{Dir: dir, CacheDir: o.CacheDir, Logger: log,
		// Every case is judged on its own: a case that expects a fault must
		// not open the circuit for the next one.
		BreakerThreshold: math.MaxInt32})
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	mod := &Module{Name: name, Kind: man.Kind, m: m, dir: dir}
	st, _ := m.StatusOf(name)
	if st.State != plugins.StateServing {
		mod.Close()
		return nil, fmt.Errorf("%w: %s: %s", ErrRefused, name, st.Refusal)
	}
	mod.Version = st.Version
	return mod, nil
}

// Close unloads the module and removes its private directory.
func (m *Module) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = m.m.Close(ctx)
	os.RemoveAll(m.dir)
}

// Result is one call's outcome.
type Result struct {
	Call   string  `json:"call"`
	Answer *Answer `json:"answer,omitempty"`
	// Fault is set when the call failed or the host would refuse its answer.
	Fault *Fault `json:"fault,omitempty"`
	// Duration is the call's wall time (the module call alone).
	Duration         time.Duration `json:"duration_ns"`
	MemoryPages      uint32        `json:"memory_pages"`
	MemoryLimitPages uint32        `json:"memory_limit_pages"`
}

// Fault is a failed call, or an answer the host's checks refuse, with the
// kind the watcher would record (plugins.FaultKind values, or "unsafe" and
// "bad-output" for the host's own checks).
type Fault struct {
	Kind    string `json:"kind"`
	Message string `json:"message"`
}

// Fault kinds the host's checks assign (as the watcher does).
const (
	FaultUnsafe    = "unsafe"
	FaultBadOutput = "bad-output"
)

// Run asks the module for its answer to v and applies the host's checks.
// An error is only for a view that cannot be sent (wrong call for the
// module's kind, malformed view); a module failure is Result.Fault.
func (m *Module) Run(ctx context.Context, v *View) (*Result, error) {
	call, err := v.Call()
	if err != nil {
		return nil, err
	}
	want := abi.KindReleasePolicy
	if call != CallDecide {
		want = abi.KindCSIAdapter
	}
	if m.Kind != want {
		return nil, fmt.Errorf("a %s view is for a %s module; %s is a %s", call, want, m.Name, m.Kind)
	}
	res := &Result{Call: call}
	start := time.Now()
	switch call {
	case CallDecide:
		req := v.Policy.Request()
		resp, err := m.m.DecideRelease(ctx, m.Name, req)
		res.Duration = time.Since(start)
		if err == nil {
			res.Answer = policyAnswer(resp)
			err = checkPolicy(req, resp)
		}
		res.Fault = faultOf(err)
	case CallAdapt:
		req := v.Adapter.Request()
		resp, err := m.m.AdaptRequest(ctx, m.Name, req)
		res.Duration = time.Since(start)
		if err == nil {
			res.Answer = adapterAnswer(resp)
			err = checkAdapter(req, resp)
		}
		res.Fault = faultOf(err)
	case CallClassify:
		req := v.Classify.Request()
		resp, err := m.m.ClassifyError(ctx, m.Name, req)
		res.Duration = time.Since(start)
		if err == nil {
			res.Answer = classifyAnswer(resp)
			err = checkClassify(req, resp)
		}
		res.Fault = faultOf(err)
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if st, ok := m.m.StatusOf(m.Name); ok {
		res.MemoryPages, res.MemoryLimitPages = st.MemoryPages, st.MemoryLimitPages
	}
	return res, nil
}

// hostFault is a refusal by the host's checks.
type hostFault struct{ kind, msg string }

func (f *hostFault) Error() string { return f.msg }

func faultOf(err error) *Fault {
	if err == nil {
		return nil
	}
	var hf *hostFault
	if errors.As(err, &hf) {
		return &Fault{Kind: hf.kind, Message: hf.msg}
	}
	var fe *plugins.FaultError
	if errors.As(err, &fe) {
		return &Fault{Kind: string(fe.Kind), Message: fe.Error()}
	}
	return &Fault{Kind: "error", Message: err.Error()}
}
