package plugins

import (
	"testing"
	"time"
)

func TestManifestChanges(t *testing.T) {
	base := Manifest{Kind: "release-policy", Version: "1.0.0", Default: true,
		Limits: Limits{MemoryPages: 256, CallTimeout: time.Second, PoolSize: 1}}
	tests := []struct {
		name      string
		mutate    func(m *Manifest)
		want      string // joinChanges of every change
		selection string // joinChanges of the selection changes
	}{
		{"same", func(*Manifest) {}, "", ""},
		{"scaffold without default", func(m *Manifest) { m.Default, m.Version = false, "0.1.0" },
			"default: true -> false; version: 1.0.0 -> 0.1.0", "default: true -> false"},
		{"volumes, order ignored", func(m *Manifest) { m.Volumes = []string{"b/*", "a/*"} },
			"volumes: - -> [a/*, b/*]", "volumes: - -> [a/*, b/*]"},
		{"limits and failure strategy", func(m *Manifest) {
			m.Limits.PoolSize, m.Limits.CallTimeout, m.OnFailure = 4, 2*time.Second, OnFailureNative
		},
			"limits.call_timeout: 1s -> 2s; limits.pool_size: 1 -> 4; on_failure: - -> native", ""},
		{"config is not a change", func(m *Manifest) { m.Config = map[string]string{"grace": "1s"} }, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			to := base
			tt.mutate(&to)
			cs := ManifestChanges(&base, &to)
			if got := joinChanges(cs); got != tt.want {
				t.Errorf("changes %q, want %q", got, tt.want)
			}
			if got := joinChanges(selectionChanges(cs)); got != tt.selection {
				t.Errorf("selection changes %q, want %q", got, tt.selection)
			}
		})
	}
}
