package plugins

import (
	"encoding/hex"
	"errors"
	"fmt"
	"path"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2/hclsimple"

	"github.com/volhost/volhost/abi"
)

// Manifest defaults, chosen for a Go guest: it starts at 32 pages (2 MiB)
// and its runtime grows the heap in steps, so 256 pages (16 MiB) leave room
// for a few hundred claims per request.
const (
	DefaultMemoryPages = 256
	DefaultCallTimeout = 100 * time.Millisecond
	DefaultPoolSize    = 4
	DefaultMaxCalls    = 10000
	// DefaultTableElements bounds each table of an instance. A Go guest's
	// one table holds an entry per function, about 6,000 for the examples;
	// wazero keeps 8 bytes per entry on the Go heap.
	DefaultTableElements = 65536
	maxPoolSize          = 256
)

// Host maxima (Options.Maxima, the agent's module_limits block) used where
// the agent sets none: a manifest asking for more is refused, naming the
// limit. A call_timeout of days would let one module spin a CPU forever.
const (
	DefaultMaxCallTimeout   = 10 * time.Second
	DefaultMaxMemoryPages   = 16384   // 1 GiB per instance
	DefaultMaxTableElements = 1 << 20 // 8 MiB of host heap per table
	DefaultMaxModuleSize    = 64 << 20
)

// Maxima are the host's upper bounds on what a manifest may ask for, and on
// a module file's size. A zero field takes its Default.
type Maxima struct {
	CallTimeout   time.Duration
	MemoryPages   uint32
	TableElements uint32
	ModuleSize    int64 // bytes, of NAME.wasm (NAME.hcl is bounded at 1 MiB)
	// RequireSHA256 refuses a manifest without a sha256 pin, so that a
	// module's code and manifest can only change together (README "Hot
	// swap").
	RequireSHA256 bool
}

// WithDefaults fills the zero fields with the Default* maxima.
func (x Maxima) WithDefaults() Maxima { return x.withDefaults() }

// withDefaults fills the zero fields.
func (x Maxima) withDefaults() Maxima {
	if x.CallTimeout <= 0 {
		x.CallTimeout = DefaultMaxCallTimeout
	}
	if x.MemoryPages == 0 {
		x.MemoryPages = DefaultMaxMemoryPages
	}
	if x.TableElements == 0 {
		x.TableElements = DefaultMaxTableElements
	}
	if x.ModuleSize <= 0 {
		x.ModuleSize = DefaultMaxModuleSize
	}
	return x
}

// LimitError is a manifest asking for more than a host maximum.
type LimitError struct {
	Limit   string // the manifest's attribute, e.g. "limits.call_timeout"
	Maximum string // the agent's setting, e.g. "module_limits.max_call_timeout"
	Got     string
	Max     string
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("%s = %s is over the agent's %s = %s", e.Limit, e.Got, e.Maximum, e.Max)
}

// CheckMaxima refuses a manifest over one of the host's maxima, naming it.
func (m *Manifest) CheckMaxima(x Maxima) error {
	x = x.withDefaults()
	l := m.Limits
	switch {
	case l.CallTimeout > x.CallTimeout:
		return &LimitError{"limits.call_timeout", "module_limits.max_call_timeout", fmt.Sprintf("%q", l.CallTimeout), fmt.Sprintf("%q", x.CallTimeout)}
	case l.MemoryPages > x.MemoryPages:
		return &LimitError{"limits.memory_pages", "module_limits.max_memory_pages", fmt.Sprint(l.MemoryPages), fmt.Sprint(x.MemoryPages)}
	case l.TableElements > x.TableElements:
		return &LimitError{"limits.table_elements", "module_limits.max_table_elements", fmt.Sprint(l.TableElements), fmt.Sprint(x.TableElements)}
	case x.RequireSHA256 && m.SHA256 == "":
		return errors.New("no sha256 pin, and the agent requires one (module_limits.require_sha256): pin the .wasm's hex SHA-256 so code and manifest swap as one")
	}
	return nil
}

// Manifest is a module's NAME.hcl, decoded and validated.
type Manifest struct {
	Kind      abi.Kind
	Version   string
	PluginIDs []string // glob patterns over CSI plugin IDs
	Volumes   []string // "namespace-glob/id-glob" selectors
	Default   bool
	Limits    Limits
	Config    map[string]string
	SHA256    string // lower-case hex pin of the .wasm, "" for none
	// Mode is ModeServe, or ModeShadow: the generation runs beside the
	// serving one on the same requests, never acts, and its disagreements
	// are counted until `module promote` makes it serve.
	Mode string
	// OnFailure is what a volume gets when this module faults or its
	// circuit is open: OnFailureWait, OnFailureNative or
	// OnFailureLastKnownGood. Every answer is still checked by the host.
	OnFailure string
	// Rollback bounds a promoted generation's faults: more than MaxFaults
	// within Window (or its circuit opening) returns the module to its
	// last known good generation.
	Rollback RollbackLimit
}

// Module modes (manifest mode).
const (
	ModeServe  = "serve"
	ModeShadow = "shadow"
)

// Failure strategies (manifest on_failure).
const (
	// OnFailureWait keeps the claim waiting and visible (the default).
	OnFailureWait = "wait"
	// OnFailureNative asks the built-in default policy or spec adapter.
	OnFailureNative = "native"
	// OnFailureLastKnownGood asks the module's previous generation.
	OnFailureLastKnownGood = "last_known_good"
)

// RollbackLimit is a manifest's rollback block.
type RollbackLimit struct {
	MaxFaults int
	Window    time.Duration
}

// Rollback defaults: three faults within a minute is no blip for a
// module whose calls take microseconds.
const (
	DefaultRollbackMaxFaults = 3
	DefaultRollbackWindow    = time.Minute
)

// Limits bound what one module may consume.
type Limits struct {
	MemoryPages uint32        // per-instance memory cap (64 KiB pages)
	CallTimeout time.Duration // per call, combined with the caller's deadline
	PoolSize    int           // instances alive at once
	MaxCalls    int           // calls an instance serves before it is replaced
	// TableElements caps every table of an instance: its initial size is
	// checked at load, a table.grow past it traps (FaultTableLimit).
	TableElements uint32
}

// manifestHCL is the file's schema. Attributes not listed here are
// rejected by gohcl, naming the file, line and attribute.
type manifestHCL struct {
	Kind      string            `hcl:"kind"`
	Version   string            `hcl:"version,optional"`
	PluginIDs []string          `hcl:"plugin_ids,optional"`
	Volumes   []string          `hcl:"volumes,optional"`
	Default   bool              `hcl:"default,optional"`
	Limits    *limitsHCL        `hcl:"limits,block"`
	Config    map[string]string `hcl:"config,optional"`
	SHA256    string            `hcl:"sha256,optional"`
	Mode      string            `hcl:"mode,optional"`
	OnFailure string            `hcl:"on_failure,optional"`
	Rollback  *rollbackHCL      `hcl:"rollback,block"`
}

type rollbackHCL struct {
	MaxFaults *int    `hcl:"max_faults,optional"`
	Window    *string `hcl:"window,optional"`
}

type limitsHCL struct {
	MemoryPages *int    `hcl:"memory_pages,optional"`
	CallTimeout *string `hcl:"call_timeout,optional"`
	PoolSize    *int    `hcl:"pool_size,optional"`
	MaxCalls    *int    `hcl:"max_calls,optional"`
	// TableElements is an int64 so a value above 2^32 is refused by range,
	// not wrapped.
	TableElements *int64 `hcl:"table_elements,optional"`
}

// ParseManifest decodes and validates a manifest. filename is only used in
// error messages. Every error names the file and what is wrong with it.
func ParseManifest(filename string, src []byte) (*Manifest, error) {
	var h manifestHCL
	if err := hclsimple.Decode(ensureHCLExt(filename), src, nil, &h); err != nil {
		return nil, fmt.Errorf("manifest %s: %w", filename, err)
	}
	m := &Manifest{
		Kind:      abi.Kind(h.Kind),
		Version:   h.Version,
		PluginIDs: h.PluginIDs,
		Volumes:   h.Volumes,
		Default:   h.Default,
		Config:    h.Config,
		SHA256:    strings.ToLower(h.SHA256),
		Mode:      cmpOr(h.Mode, ModeServe),
		OnFailure: cmpOr(h.OnFailure, OnFailureWait),
		Rollback:  RollbackLimit{MaxFaults: DefaultRollbackMaxFaults, Window: DefaultRollbackWindow},
		Limits: Limits{
			MemoryPages:   DefaultMemoryPages,
			CallTimeout:   DefaultCallTimeout,
			PoolSize:      DefaultPoolSize,
			MaxCalls:      DefaultMaxCalls,
			TableElements: DefaultTableElements,
		},
	}
	if err := m.applyLimits(h.Limits); err != nil {
		return nil, fmt.Errorf("manifest %s: %w", filename, err)
	}
	if err := m.applyRollback(h.Rollback); err != nil {
		return nil, fmt.Errorf("manifest %s: %w", filename, err)
	}
	if err := m.validate(); err != nil {
		return nil, fmt.Errorf("manifest %s: %w", filename, err)
	}
	return m, nil
}

// ensureHCLExt makes hclsimple pick the native syntax whatever the name.
func ensureHCLExt(name string) string {
	if strings.HasSuffix(name, ".hcl") {
		return name
	}
	return name + ".hcl"
}

func (m *Manifest) applyLimits(l *limitsHCL) error {
	if l == nil {
		return nil
	}
	if l.MemoryPages != nil {
		// 65536 pages is the wasm32 maximum (4 GiB); wazero panics above it.
		if *l.MemoryPages < 1 || *l.MemoryPages > 65536 {
			return fmt.Errorf("limits.memory_pages = %d: must be between 1 and 65536", *l.MemoryPages)
		}
		m.Limits.MemoryPages = uint32(*l.MemoryPages)
	}
	if l.CallTimeout != nil {
		d, err := time.ParseDuration(*l.CallTimeout)
		if err != nil {
			return fmt.Errorf("limits.call_timeout = %q: %w", *l.CallTimeout, err)
		}
		if d <= 0 {
			return fmt.Errorf("limits.call_timeout = %q: must be positive", *l.CallTimeout)
		}
		m.Limits.CallTimeout = d
	}
	if l.PoolSize != nil {
		if *l.PoolSize < 1 || *l.PoolSize > maxPoolSize {
			return fmt.Errorf("limits.pool_size = %d: must be between 1 and %d", *l.PoolSize, maxPoolSize)
		}
		m.Limits.PoolSize = *l.PoolSize
	}
	if l.MaxCalls != nil {
		if *l.MaxCalls < 1 {
			return fmt.Errorf("limits.max_calls = %d: must be at least 1", *l.MaxCalls)
		}
		m.Limits.MaxCalls = *l.MaxCalls
	}
	if l.TableElements != nil {
		if *l.TableElements < 1 || *l.TableElements > 1<<32-1 {
			return fmt.Errorf("limits.table_elements = %d: must be between 1 and %d", *l.TableElements, uint32(1<<32-1))
		}
		m.Limits.TableElements = uint32(*l.TableElements)
	}
	return nil
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func (m *Manifest) applyRollback(r *rollbackHCL) error {
	if r == nil {
		return nil
	}
	if r.MaxFaults != nil {
		if *r.MaxFaults < 1 {
			return fmt.Errorf("rollback.max_faults = %d: must be at least 1", *r.MaxFaults)
		}
		m.Rollback.MaxFaults = *r.MaxFaults
	}
	if r.Window != nil {
		d, err := time.ParseDuration(*r.Window)
		if err != nil {
			return fmt.Errorf("rollback.window = %q: %w", *r.Window, err)
		}
		if d <= 0 {
			return fmt.Errorf("rollback.window = %q: must be positive", *r.Window)
		}
		m.Rollback.Window = d
	}
	return nil
}

func (m *Manifest) validate() error {
	switch m.Kind {
	case abi.KindReleasePolicy, abi.KindCSIAdapter:
	default:
		return fmt.Errorf("kind = %q: must be %q or %q", m.Kind, abi.KindReleasePolicy, abi.KindCSIAdapter)
	}
	switch m.Mode {
	case ModeServe, ModeShadow:
	default:
		return fmt.Errorf("mode = %q: must be %q or %q", m.Mode, ModeServe, ModeShadow)
	}
	switch m.OnFailure {
	case OnFailureWait, OnFailureNative, OnFailureLastKnownGood:
	default:
		return fmt.Errorf("on_failure = %q: must be %q, %q or %q", m.OnFailure, OnFailureWait, OnFailureNative, OnFailureLastKnownGood)
	}
	for _, p := range m.PluginIDs {
		if p == "" {
			return errors.New("plugin_ids: empty pattern")
		}
		if _, err := path.Match(p, ""); err != nil {
			return fmt.Errorf("plugin_ids: pattern %q: %w", p, err)
		}
	}
	for _, v := range m.Volumes {
		ns, id, ok := strings.Cut(v, "/")
		if !ok || ns == "" || id == "" {
			return fmt.Errorf("volumes: selector %q: want \"namespace/id-glob\"", v)
		}
		for _, p := range []string{ns, id} {
			if _, err := path.Match(p, ""); err != nil {
				return fmt.Errorf("volumes: selector %q: %w", v, err)
			}
		}
	}
	if m.SHA256 != "" {
		if b, err := hex.DecodeString(m.SHA256); err != nil || len(b) != 32 {
			return fmt.Errorf("sha256 = %q: want 64 hex digits", m.SHA256)
		}
	}
	return nil
}

// Selects reports whether the manifest would have its module serve t at
// all: a volume selector, a plugin ID pattern or default = true. It
// ignores rank (another module may win); the agent uses it to find the
// volumes a swap may have changed the judgement of.
func (m *Manifest) Selects(t Target) bool {
	return m.Default || m.matchVolume(t.Namespace, t.VolumeID) || (t.PluginID != "" && m.matchPlugin(t.PluginID))
}

// matchVolume reports whether one of the volume selectors matches.
func (m *Manifest) matchVolume(namespace, volumeID string) bool {
	for _, v := range m.Volumes {
		ns, id, _ := strings.Cut(v, "/")
		if globMatch(ns, namespace) && globMatch(id, volumeID) {
			return true
		}
	}
	return false
}

// matchPlugin reports whether one of the plugin ID patterns matches.
func (m *Manifest) matchPlugin(pluginID string) bool {
	for _, p := range m.PluginIDs {
		if globMatch(p, pluginID) {
			return true
		}
	}
	return false
}

// globMatch is path.Match with patterns already validated at parse time.
func globMatch(pattern, s string) bool {
	ok, _ := path.Match(pattern, s)
	return ok
}
