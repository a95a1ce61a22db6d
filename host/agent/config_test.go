package agent

import (
	"strings"
	"testing"
	"time"
)

func TestLoadConfigFileMergesOverDefaults(t *testing.T) {
	file, err := LoadConfigFile("testdata/agent.hcl")
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Merge(file)
	d, err := cfg.Validate()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.DataDir != "/var/lib/volhost" || cfg.HTTP.Address != "127.0.0.1:5757" || cfg.ModuleDir != "/etc/volhost/modules" {
		t.Errorf("file values not applied: %+v %+v", cfg, cfg.HTTP)
	}
	if cfg.Watcher.ControllerConcurrency != 4 || cfg.Watcher.MaxAttempts != 50 || d.StuckAfter != 30*time.Minute {
		t.Errorf("watcher values not applied: %+v, stuck_after %s", cfg.Watcher, d.StuckAfter)
	}
	if cfg.Watcher.VolumeRateLimit != 1 || cfg.Watcher.VolumeRateBurst != 3 {
		t.Errorf("volume rate limit not applied: %+v", cfg.Watcher)
	}
	if d.BackoffBase != time.Second || cfg.Watcher.MaxConcurrency != 16 {
		t.Errorf("defaults lost: backoff_base %s max_concurrency %d", d.BackoffBase, cfg.Watcher.MaxConcurrency)
	}
	if !cfg.EscapeHatch.AutoForceDeregister || d.EscapeAfter != 15*time.Minute {
		t.Errorf("escape hatch not applied: %+v", cfg.EscapeHatch)
	}
}

func TestLoadConfigFileRejectsUnknownAttribute(t *testing.T) {
	_, err := LoadConfigFile("testdata/unknown.hcl")
	if err == nil {
		t.Fatal("unknown attribute accepted")
	}
	for _, want := range []string{"unknown.hcl:3", "controler_concurrency"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
}

func TestValidateNamesEveryBadSetting(t *testing.T) {
	tests := []struct {
		name string
		edit func(*Config)
		want []string
	}{
		{"neither dev nor data dir", func(c *Config) {}, []string{"-dev", "-data-dir"}},
		{"both dev and data dir", func(c *Config) { c.Dev = true; c.DataDir = "/x" }, []string{"exclusive"}},
		{"bad duration", func(c *Config) { c.Dev = true; c.Watcher.StuckAfter = "soon" }, []string{"watcher.stuck_after", `"soon"`}},
		{"negative duration", func(c *Config) { c.Dev = true; c.EscapeHatch.After = "-1m" }, []string{"escape_hatch.after", "positive"}},
		{"zero concurrency", func(c *Config) { c.Dev = true; c.Watcher.ControllerConcurrency = -2 }, []string{"watcher.controller_concurrency"}},
		{"base above max", func(c *Config) { c.Dev = true; c.Watcher.BackoffBase = "2m" }, []string{"backoff_base", "backoff_max"}},
		{"negative rate limit", func(c *Config) { c.Dev = true; c.Watcher.VolumeRateLimit = -1 }, []string{"watcher.volume_rate_limit"}},
		// hclog reads an unknown level as "none" and logs at info: it was accepted silently.
		{"unknown log level", func(c *Config) { c.Dev = true; c.LogLevel = "verbose" }, []string{"log_level (-log-level) must be one of trace, debug, info, warn, error, off", `got "verbose"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			tt.edit(cfg)
			_, err := cfg.Validate()
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
	ok := DefaultConfig()
	ok.Dev = true
	if _, err := ok.Validate(); err != nil {
		t.Errorf("default dev config refused: %v", err)
	}
	for _, level := range append(LogLevels, "WARN", "") {
		ok.LogLevel = level
		if _, err := ok.Validate(); err != nil {
			t.Errorf("log level %q refused: %v", level, err)
		}
	}
}

// TestModuleLimitsConfig: module_limits parses into the manager's maxima,
// and a bad setting is named.
func TestModuleLimitsConfig(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Dev = true
	cfg.Merge(&Config{ModuleLimits: &ModuleLimitsConfig{MaxCallTimeout: "2s", MaxMemoryPages: 512,
		MaxTableElements: 4096, MaxModuleSize: "8MiB", RequireSHA256: true}})
	d, err := cfg.Validate()
	if err != nil {
		t.Fatal(err)
	}
	x := d.ModuleMaxima
	if x.CallTimeout != 2*time.Second || x.MemoryPages != 512 || x.TableElements != 4096 || x.ModuleSize != 8<<20 || !x.RequireSHA256 {
		t.Fatalf("maxima %+v", x)
	}
	for _, tc := range []struct {
		ml   ModuleLimitsConfig
		want string
	}{
		{ModuleLimitsConfig{MaxCallTimeout: "forever"}, "module_limits.max_call_timeout"},
		{ModuleLimitsConfig{MaxMemoryPages: 70000}, "module_limits.max_memory_pages"},
		{ModuleLimitsConfig{MaxTableElements: -1}, "module_limits.max_table_elements"},
		{ModuleLimitsConfig{MaxModuleSize: "64MB"}, `module_limits.max_module_size: "64MB" is not a positive size`},
	} {
		cfg := DefaultConfig()
		cfg.Dev = true
		cfg.ModuleLimits = &tc.ml
		if _, err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: err = %v, want it to name %q", tc.ml, err, tc.want)
		}
	}
}
