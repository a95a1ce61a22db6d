package agent

import (
	"context"
	"crypto/ecdsa"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/plugins"
	"github.com/volhost/volhost/plugins/source"
)

// ModuleSourceConfig is a module_source "NAME" block: module
// NAME comes from a signed OCI bundle, polled for a new digest.
//
//	module_source "policy" {
//	  oci           = "registry.example/modules/policy:stable"
//	  public_key    = "/etc/volhost/cosign.pub"
//	  poll_interval = "1m"
//	  shadow        = false   # true: a new digest loads as the shadow candidate
//	}
type ModuleSourceConfig struct {
	Name         string `hcl:"name,label"`
	OCI          string `hcl:"oci"`
	PublicKey    string `hcl:"public_key"`
	PollInterval string `hcl:"poll_interval,optional"`
	Shadow       bool   `hcl:"shadow,optional"`
}

// DefaultPollInterval is how often a module source's tag is resolved.
const DefaultPollInterval = time.Minute

// moduleSource is a validated module_source block.
type moduleSource struct {
	cfg      ModuleSourceConfig
	key      *ecdsa.PublicKey
	interval time.Duration
}

// validateSources checks every module_source block: a module directory to
// write into, a parsable reference, a readable P-256 public key, a positive
// interval and one block per module.
func (c *Config) validateSources() ([]moduleSource, []error) {
	var out []moduleSource
	var errs []error
	seen := map[string]bool{}
	for _, s := range c.ModuleSources {
		where := fmt.Sprintf("module_source %q", s.Name)
		if c.ModuleDir == "" {
			errs = append(errs, fmt.Errorf("%s: needs module_dir, where the pulled bundle is written", where))
			continue
		}
		if s.Name == "" || filepath.Base(s.Name) != s.Name || s.Name[0] == '.' {
			errs = append(errs, fmt.Errorf("%s: the label is the module's name (NAME.wasm): no path, no leading dot", where))
			continue
		}
		if err := structs.ValidateID("name", s.Name); err != nil {
			// The module's name is an ID in the API and the CLI: the one
			// rule, so no two modules print the same.
			errs = append(errs, fmt.Errorf("%s: %w", where, err))
			continue
		}
		if seen[s.Name] {
			errs = append(errs, fmt.Errorf("%s: declared twice", where))
			continue
		}
		seen[s.Name] = true
		if _, err := name.ParseReference(s.OCI); err != nil {
			errs = append(errs, fmt.Errorf("%s: oci = %q: %w", where, s.OCI, err))
			continue
		}
		pem, err := os.ReadFile(s.PublicKey)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: public_key: %w", where, err))
			continue
		}
		key, err := source.ParsePublicKey(pem)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: public_key %s: %w", where, s.PublicKey, err))
			continue
		}
		iv := DefaultPollInterval
		if s.PollInterval != "" {
			if iv, err = time.ParseDuration(s.PollInterval); err != nil || iv <= 0 {
				errs = append(errs, fmt.Errorf("%s: poll_interval = %q: want a positive duration", where, s.PollInterval))
				continue
			}
		}
		out = append(out, moduleSource{cfg: s, key: key, interval: iv})
	}
	return out, errs
}

// signedModules tells the runtime which modules run only what their
// module_source verified, naming the source in its refusals.
func (a *Agent) signedModules() map[string]string {
	out := map[string]string{}
	for _, s := range a.sources {
		out[s.cfg.Name] = fmt.Sprintf("module_source %q (%s)", s.cfg.Name, s.cfg.OCI)
	}
	return out
}

// startSources polls each module source until ctx ends.
func (a *Agent) startSources(ctx context.Context) {
	if a.Modules == nil {
		return
	}
	for _, s := range a.sources {
		p := &source.Poller{Module: s.cfg.Name, Ref: s.cfg.OCI, Key: s.key, MaxWasm: a.moduleMaxima.ModuleSize,
			Apply: a.applyBundle(s), Refused: a.bundleRefused(s), Serving: a.servingVersion(s.cfg.Name)}
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			t := a.clock.NewTicker(s.interval)
			defer t.Stop()
			for {
				if _, err := p.Poll(ctx); err != nil && ctx.Err() == nil {
					a.logger.Warn("module source poll failed; trying again at the next interval", "module", s.cfg.Name, "oci", s.cfg.OCI, "error", err)
				}
				select {
				case <-ctx.Done():
					return
				case <-t.Chan():
				}
			}
		}()
	}
}

// servingVersion is the version module name serves ("" when none), for
// the source's refusal of older bundles (source.Poller.Serving).
func (a *Agent) servingVersion(name string) func() string {
	return func() string {
		st, ok := a.Modules.StatusOf(name)
		if !ok || (st.State != plugins.StateServing && st.State != plugins.StateOpenCircuit) {
			return ""
		}
		return st.Version
	}
}

// applyBundle installs a verified bundle: as the shadow candidate, or into
// the module directory (manifest, then wasm, each renamed into place; the
// manifest pins the wasm, so the pair forms a generation only once both
// are there) followed by a reload.
func (a *Agent) applyBundle(s moduleSource) func(context.Context, source.Bundle, v1.Hash) error {
	return func(ctx context.Context, b source.Bundle, d v1.Hash) error {
		a.logger.Info("module source: verified bundle", "module", s.cfg.Name, "oci", s.cfg.OCI, "digest", d.String(), "shadow", s.cfg.Shadow)
		if s.cfg.Shadow {
			_, err := a.Modules.ShadowSigned(ctx, s.cfg.Name, b.Wasm, b.Manifest)
			return err
		}
		for _, f := range []struct {
			ext  string
			data []byte
		}{{".hcl", b.Manifest}, {".wasm", b.Wasm}} {
			dst := filepath.Join(a.cfg.ModuleDir, s.cfg.Name+f.ext)
			tmp := filepath.Join(a.cfg.ModuleDir, "."+s.cfg.Name+f.ext+".oci")
			if err := os.WriteFile(tmp, f.data, 0o644); err != nil {
				return err
			}
			if err := os.Rename(tmp, dst); err != nil {
				return errors.Join(err, os.Remove(tmp))
			}
		}
		sts, err := a.Modules.Reload(ctx)
		if err != nil {
			return err
		}
		for _, st := range sts {
			if st.Name == s.cfg.Name && st.Refusal != "" {
				return fmt.Errorf("the runtime refused the bundle: %s", st.Refusal)
			}
		}
		return nil
	}
}

// bundleRefused records a refused digest: logged and a module event, once
// per digest; the serving generation keeps serving.
func (a *Agent) bundleRefused(s moduleSource) func(v1.Hash, error) {
	return func(d v1.Hash, err error) {
		reason := fmt.Sprintf("module_source %s@%s refused: %v", s.cfg.OCI, d, err)
		a.logger.Error("module source: bundle refused; the serving generation keeps serving", "module", s.cfg.Name, "reason", reason)
		a.moduleEvents.add(plugins.Event{Kind: plugins.EventRefused, Module: s.cfg.Name, Reason: reason, Time: a.clock.Now()})
	}
}
