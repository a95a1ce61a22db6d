package plugins

import (
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/volhost/volhost/internal/testutil"
)

// TestGuestLogRouted checks that volhost.log lines land in the module's
// named logger with its name and version (fault-policy logs from configure).
func TestGuestLogRouted(t *testing.T) {
	faulty := exampleWasm(t, "fault-policy")
	var out testutil.SyncBuffer
	newEnv(t, func(dir string) {
		writeModule(t, dir, "noisy", faulty, manifest("release-policy", ""))
	}, func(o *Options) {
		o.Logger = hclog.New(&hclog.LoggerOptions{Name: "agent", Level: hclog.Info, Output: &out})
	})
	var line string
	for _, l := range strings.Split(out.String(), "\n") {
		if strings.Contains(l, "fault-policy configured") {
			line = l
			break
		}
	}
	if line == "" {
		t.Fatalf("no guest log line in:\n%s", out.String())
	}
	for _, want := range []string{"[INFO]", "agent.plugins.noisy", "module=noisy", "module_version=1.0.0"} {
		if !strings.Contains(line, want) {
			t.Errorf("guest log line %q lacks %q", line, want)
		}
	}
}
