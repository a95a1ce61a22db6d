package plugins

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// TestSignedModuleShadow: a module in Options.Signed refuses an uploaded
// candidate (Shadow) with ErrSignatureRequired naming its source, even
// before anything serves, and nothing shadows; its source's verified
// bundle (ShadowSigned) shadows as any candidate does. Other modules
// take uploads as before.
func TestSignedModuleShadow(t *testing.T) {
	e := newEnv(t, func(dir string) {
		writeModule(t, dir, "policy", exampleWasm(t, "default-policy"), []byte(servingManifest))
		writeModule(t, dir, "other", exampleWasm(t, "default-policy"), []byte(strings.Replace(servingManifest, "default = true", "default = false", 1)))
	}, func(o *Options) {
		o.Signed = map[string]string{"policy": "the signed source S", "later": "the signed source L"}
	})
	ctx := context.Background()
	for _, name := range []string{"policy", "later"} {
		_, err := e.m.Shadow(ctx, name, exampleWasm(t, "grace-policy"), nil)
		if !errors.Is(err, ErrSignatureRequired) || !strings.Contains(err.Error(), "the signed source") {
			t.Fatalf("upload for signed module %s: %v, want ErrSignatureRequired naming its source", name, err)
		}
	}
	if st, _ := e.m.StatusOf("policy"); st.Shadow != nil {
		t.Fatalf("a refused upload shadows: %+v", st.Shadow)
	}
	if _, err := e.m.Promote(ctx, "policy"); !errors.Is(err, ErrNoShadow) {
		t.Fatalf("promote after the refused upload: %v", err)
	}
	if st, err := e.m.ShadowSigned(ctx, "policy", exampleWasm(t, "grace-policy"), nil); err != nil || st.Shadow == nil {
		t.Fatalf("the source's verified candidate: %+v, %v", st, err)
	}
	if st, err := e.m.Shadow(ctx, "other", exampleWasm(t, "grace-policy"), nil); err != nil || st.Shadow == nil {
		t.Fatalf("an upload for an unsigned module: %+v, %v", st, err)
	}
}
