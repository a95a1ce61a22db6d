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
	maxPoolSize        = 256
)

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
}

// Limits bound what one module may consume.
type Limits struct {
	MemoryPages uint32        // per-instance memory cap (64 KiB pages)
	CallTimeout time.Duration // per call, combined with the caller's deadline
	PoolSize    int           // instances alive at once
	MaxCalls    int           // calls an instance serves before it is replaced
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
}

type limitsHCL struct {
	MemoryPages *int    `hcl:"memory_pages,optional"`
	CallTimeout *string `hcl:"call_timeout,optional"`
	PoolSize    *int    `hcl:"pool_size,optional"`
	MaxCalls    *int    `hcl:"max_calls,optional"`
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
		Limits: Limits{
			MemoryPages: DefaultMemoryPages,
			CallTimeout: DefaultCallTimeout,
			PoolSize:    DefaultPoolSize,
			MaxCalls:    DefaultMaxCalls,
		},
	}
	if err := m.applyLimits(h.Limits); err != nil {
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
	return nil
}

func (m *Manifest) validate() error {
	switch m.Kind {
	case abi.KindReleasePolicy, abi.KindCSIAdapter:
	default:
		return fmt.Errorf("kind = %q: must be %q or %q", m.Kind, abi.KindReleasePolicy, abi.KindCSIAdapter)
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
