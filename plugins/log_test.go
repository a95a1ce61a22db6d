package plugins

import (
	"bytes"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"
)

// syncBuffer is a goroutine-safe log sink.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestGuestLogRouted checks that volhost.log lines land in the module's
// named logger with its name and version (fault-policy logs from configure).
func TestGuestLogRouted(t *testing.T) {
	faulty := exampleWasm(t, "fault-policy")
	var out syncBuffer
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
