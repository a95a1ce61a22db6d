package plugins

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// DiscardShadow drops the candidate, keeps the serving generation, and a
// reload does not bring the same directory files back as a candidate.
func TestDiscardShadow(t *testing.T) {
	e := newEnv(t, func(dir string) {
		writeModule(t, dir, "policy", exampleWasm(t, "default-policy"), []byte(servingManifest))
	}, nil)
	ctx := context.Background()
	if _, err := e.m.DiscardShadow(ctx, "policy"); !errors.Is(err, ErrNoShadow) {
		t.Fatalf("discard with no candidate: %v", err)
	}
	writeModule(t, e.dir, "policy", exampleWasm(t, "grace-policy"), []byte("kind = \"release-policy\"\nversion = \"2.0.0\"\ndefault = true\nmode = \"shadow\"\nconfig = { grace = \"30s\" }\n"))
	if _, err := e.m.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := e.m.DiscardShadow(ctx, "policy")
	if err != nil {
		t.Fatal(err)
	}
	if st.Shadow != nil || st.Version != "1.0.0" || st.State != StateServing || !strings.Contains(st.Refusal, "discarded by the operator") {
		t.Fatalf("after discard: %+v", st)
	}
	if len(e.eventsOf(EventShadowDiscarded)) != 1 {
		t.Fatalf("events: %+v", e.eventsOf(EventShadowDiscarded))
	}
	if _, err := e.m.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if st, _ := e.m.StatusOf("policy"); st.Shadow != nil || st.Version != "1.0.0" {
		t.Fatalf("a reload brought the discarded files back: %+v", st)
	}
}
