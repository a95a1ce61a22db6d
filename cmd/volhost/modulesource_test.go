package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/volhost/volhost/host/agent"
	"github.com/volhost/volhost/host/api/client"
	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/plugins"
	"github.com/volhost/volhost/plugins/pluginstest"
	"github.com/volhost/volhost/plugins/source/sourcetest"
)

// writeKeys writes a P-256 key pair as module sign and module_source read them.
func writeKeys(t *testing.T, dir, name string) (priv, pub string) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, _ := x509.MarshalPKCS8PrivateKey(k)
	pder, _ := x509.MarshalPKIXPublicKey(&k.PublicKey)
	priv, pub = filepath.Join(dir, name+".key"), filepath.Join(dir, name+".pub")
	os.WriteFile(priv, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600)
	os.WriteFile(pub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pder}), 0o644)
	return priv, pub
}

// TestModuleSourceOCI: push and sign a module to an in-process registry;
// the agent's module_source pulls, verifies and serves it. A push signed
// with another key and a layer tampered with on the way are refused with
// an event naming why, and the last good generation keeps serving; once
// the registry serves the signed bytes again, the new version serves.
func TestModuleSourceOCI(t *testing.T) {
	host, tamper := sourcetest.NewRegistry(t)
	ref := host + "/modules/policy:stable"
	keys := t.TempDir()
	key, pub := writeKeys(t, keys, "good")
	wrongKey, _ := writeKeys(t, keys, "wrong")
	e := &cliEnv{t: t}

	// Version 1.0.0: the default policy, pushed and signed with the CLI.
	v1 := kitFolder(t, "default-policy")
	contains(t, "module push", e.ok("module", "push", filepath.Join(v1, "default-policy.wasm"), ref), "Pushed default-policy as "+ref, "digest sha256:")
	contains(t, "module sign", e.ok("module", "sign", "-key", key, ref), "Signed "+ref)

	a := startModuleAgent(t, func(cfg *agent.Config) {
		cfg.ModuleDir = t.TempDir()
		cfg.ModuleSources = []agent.ModuleSourceConfig{{Name: "policy", OCI: ref, PublicKey: pub, PollInterval: "50ms"}}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := client.New("http://"+a.HTTPAddr(), nil)
	if err != nil {
		t.Fatal(err)
	}
	serving := func(version string) func() (bool, bool) {
		return func() (bool, bool) {
			st, ok := a.Modules.StatusOf("policy")
			return true, ok && st.State == "serving" && st.Version == version
		}
	}
	waitFor(t, ctx, "version 1.0.0 pulled and serving", serving("1.0.0"))
	refused := func(substr string) func() (bool, bool) {
		return func() (bool, bool) {
			evs, _, err := cl.Events(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, ev := range evs {
				if ev.Type == structs.EventModule && ev.Module == "policy" && ev.Fields["event"] == "refused" && strings.Contains(ev.Message, substr) {
					return true, true
				}
			}
			return false, false
		}
	}

	// Version 2.0.0 signed with another key: refused, 1.0.0 serves on.
	v2 := kitFolder(t, "grace-policy")
	man2 := filepath.Join(v2, "v2.hcl")
	os.WriteFile(man2, []byte("kind = \"release-policy\"\nversion = \"2.0.0\"\ndefault = true\n"), 0o644)
	e.ok("module", "push", "-manifest", man2, filepath.Join(v2, "grace-policy.wasm"), ref)
	e.ok("module", "sign", "-key", wrongKey, ref)
	waitFor(t, ctx, "the wrongly signed version refused", refused("signature does not verify"))
	if st, _ := a.Modules.StatusOf("policy"); st.Version != "1.0.0" || st.State != "serving" {
		t.Fatalf("after the wrongly signed push: %+v", st)
	}

	// Version 3.0.0 signed with the right key, its layers tampered with on
	// the way: refused by digest, 1.0.0 serves on.
	man3 := filepath.Join(v2, "v3.hcl")
	os.WriteFile(man3, []byte("kind = \"release-policy\"\nversion = \"3.0.0\"\ndefault = true\n"), 0o644)
	tamper.On.Store(true)
	pushed := e.ok("module", "push", "-manifest", man3, filepath.Join(v2, "grace-policy.wasm"), ref)
	e.ok("module", "sign", "-key", key, ref)
	_, digest, _ := strings.Cut(strings.TrimSpace(pushed), "(digest ")
	digest = strings.TrimSuffix(digest, ")")
	waitFor(t, ctx, "the tampered version refused", refused(digest))
	if st, _ := a.Modules.StatusOf("policy"); st.Version != "1.0.0" {
		t.Fatalf("after the tampered pull: %+v", st)
	}
	// The registry serves the signed bytes again: the next poll applies them.
	tamper.On.Store(false)
	waitFor(t, ctx, "version 3.0.0 serving once the layers verify", serving("3.0.0"))
}

// TestModuleSourceShadow: with shadow = true a signed bundle becomes the
// shadow candidate of the serving module, never serving until promoted.
func TestModuleSourceShadow(t *testing.T) {
	host, _ := sourcetest.NewRegistry(t)
	ref := host + "/modules/policy:canary"
	key, pub := writeKeys(t, t.TempDir(), "k")
	e := &cliEnv{t: t}
	grace := kitFolder(t, "grace-policy")
	man := filepath.Join(grace, "candidate.hcl")
	os.WriteFile(man, []byte("kind = \"release-policy\"\nversion = \"2.0.0\"\ndefault = true\n"), 0o644)
	e.ok("module", "push", "-manifest", man, filepath.Join(grace, "grace-policy.wasm"), ref)
	e.ok("module", "sign", "-key", key, ref)

	dir := t.TempDir()
	pluginstest.Install(t, dir, "policy", pluginstest.Wasm(t, "default-policy"), defaultPolicyManifest)
	a := startModuleAgent(t, func(cfg *agent.Config) {
		cfg.ModuleDir = dir
		cfg.ModuleSources = []agent.ModuleSourceConfig{{Name: "policy", OCI: ref, PublicKey: pub, PollInterval: "50ms", Shadow: true}}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	waitFor(t, ctx, "the pulled bundle shadowing", func() (bool, bool) {
		st, _ := a.Modules.StatusOf("policy")
		return true, st.Shadow != nil && st.Shadow.Version == "2.0.0"
	})
	if st, _ := a.Modules.StatusOf("policy"); st.Version != "1.0.0" {
		t.Fatalf("the shadowed bundle serves: %+v", st)
	}
}

// TestSignedModuleRefusesUploadedCandidates: a module that comes from a
// signed OCI bundle (module_source) runs only what its key signed. An
// uploaded shadow candidate (PUT /v1/module/NAME/shadow, `module shadow`)
// is unsigned code: promoting it would serve it, so a token with
// modules:reload, or management, would bypass the signature. The upload
// is refused, naming the module_source, and nothing shadows.
func TestSignedModuleRefusesUploadedCandidates(t *testing.T) {
	host, _ := sourcetest.NewRegistry(t)
	_, pub := writeKeys(t, t.TempDir(), "k")
	dir := t.TempDir()
	pluginstest.Install(t, dir, "policy", pluginstest.Wasm(t, "default-policy"), defaultPolicyManifest)
	a := startModuleAgent(t, func(cfg *agent.Config) {
		cfg.ModuleDir = dir
		cfg.ModuleSources = []agent.ModuleSourceConfig{{Name: "policy", OCI: host + "/modules/policy:stable", PublicKey: pub, PollInterval: "1h"}}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := client.New("http://"+a.HTTPAddr(), nil)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the module serving", func() (bool, bool) {
		st, ok := a.Modules.StatusOf("policy")
		return true, ok && st.State == "serving" && st.Version == "1.0.0"
	})
	candidate := "kind = \"release-policy\"\nversion = \"6.6.6\"\ndefault = true\n"
	_, err = cl.ShadowModule(ctx, "policy", pluginstest.Wasm(t, "grace-policy"), &candidate)
	var apiErr *client.APIError
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusForbidden || !strings.Contains(apiErr.Message, "module_source") {
		served := ""
		if err == nil {
			if st, perr := cl.PromoteModule(ctx, "policy", plugins.PromoteOptions{}); perr == nil {
				served = ", and promote then served unsigned version " + st.Version
			}
		}
		t.Fatalf("uploading an unsigned candidate for a signed module: %v, want 403 naming the module_source%s", err, served)
	}
	if st, _ := a.Modules.StatusOf("policy"); st.Shadow != nil || st.Version != "1.0.0" {
		t.Fatalf("after the refused upload: version %s, shadow %+v", st.Version, st.Shadow)
	}
	if _, err := cl.PromoteModule(ctx, "policy", plugins.PromoteOptions{}); err == nil {
		t.Fatal("promote succeeded with no signed candidate")
	}
	if st, _ := a.Modules.StatusOf("policy"); st.Version != "1.0.0" {
		t.Fatalf("after promote: version %s", st.Version)
	}
}

// TestModuleSourceRefusesAReplayedOldBundle: a signature names a digest
// forever. Whoever may push to the registry, without the key, re-points
// the tag at a bundle signed long ago (1.0.0, say one with a known bug)
// after 2.0.0 was signed and serves: the old signature still verifies,
// and the agent went back to 1.0.0. The source refuses a bundle older
// than the version serving, with a refused event naming why.
func TestModuleSourceRefusesAReplayedOldBundle(t *testing.T) {
	host, _ := sourcetest.NewRegistry(t)
	ref := host + "/modules/policy:stable"
	key, pub := writeKeys(t, t.TempDir(), "k")
	e := &cliEnv{t: t}
	v1 := kitFolder(t, "default-policy")
	e.ok("module", "push", filepath.Join(v1, "default-policy.wasm"), ref)
	e.ok("module", "sign", "-key", key, ref)
	a := startModuleAgent(t, func(cfg *agent.Config) {
		cfg.ModuleDir = t.TempDir()
		cfg.ModuleSources = []agent.ModuleSourceConfig{{Name: "policy", OCI: ref, PublicKey: pub, PollInterval: "50ms"}}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	serving := func(version string) func() (bool, bool) {
		return func() (bool, bool) {
			st, ok := a.Modules.StatusOf("policy")
			return true, ok && st.State == "serving" && st.Version == version
		}
	}
	waitFor(t, ctx, "version 1.0.0 serving", serving("1.0.0"))
	v2 := kitFolder(t, "grace-policy")
	man2 := filepath.Join(v2, "v2.hcl")
	os.WriteFile(man2, []byte("kind = \"release-policy\"\nversion = \"2.0.0\"\ndefault = true\n"), 0o644)
	e.ok("module", "push", "-manifest", man2, filepath.Join(v2, "grace-policy.wasm"), ref)
	e.ok("module", "sign", "-key", key, ref)
	waitFor(t, ctx, "version 2.0.0 serving", serving("2.0.0"))
	// The attacker: push the old bytes again (same digest, its signature
	// still in the registry), no key needed.
	e.ok("module", "push", filepath.Join(v1, "default-policy.wasm"), ref)
	// Refused, with an event saying why; 2.0.0 serves on.
	cl, err := client.New("http://"+a.HTTPAddr(), nil)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the replayed bundle refused", func() (bool, bool) {
		evs, _, err := cl.Events(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs {
			if ev.Type == structs.EventModule && ev.Fields["event"] == "refused" && strings.Contains(ev.Message, "older than the serving version") {
				return true, true
			}
		}
		return false, false
	})
	if st, _ := a.Modules.StatusOf("policy"); st.Version != "2.0.0" {
		t.Fatalf("the agent went back to the replayed bundle: %+v", st)
	}
}
