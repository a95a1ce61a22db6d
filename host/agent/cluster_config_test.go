package agent

import (
	"strings"
	"testing"
	"time"

	"github.com/volhost/volhost/host/cluster"
)

func TestServerBlockFromHCL(t *testing.T) {
	c, err := LoadConfigFile("testdata/server.hcl")
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Merge(c)
	d, err := cfg.Validate()
	if err != nil {
		t.Fatal(err)
	}
	sv := cfg.Server
	if !sv.Enabled || strings.Join(sv.Join, ",") != "10.0.0.1:4747,10.0.0.3:4747" || d.RetryMaxInterval != 10*time.Second {
		t.Fatalf("server block %+v, retry %v", sv, d.RetryMaxInterval)
	}
	// Flags win: -bootstrap-expect on the command line is kept alongside.
	cfg.Merge(&Config{Server: &ServerConfig{Join: []string{"10.0.0.9:4747"}}})
	if strings.Join(cfg.Server.Join, ",") != "10.0.0.9:4747" {
		t.Fatalf("join after merge %v", cfg.Server.Join)
	}
}

func TestServerBlockValidation(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"dev server", func(c *Config) { c.Dev = true; c.Server.Enabled = true; c.Server.BootstrapExpect = 1 }, "server mode needs -data-dir"},
		{"join without server", func(c *Config) { c.DataDir = "/d"; c.Server.Join = []string{"a:1"} }, "need server mode"},
		{"expect without server", func(c *Config) { c.DataDir = "/d"; c.Server.BootstrapExpect = 3 }, "need server mode"},
		{"negative expect", func(c *Config) { c.DataDir = "/d"; c.Server.Enabled = true; c.Server.BootstrapExpect = -1 }, "server.bootstrap_expect"},
		{"seed that joins", func(c *Config) {
			c.DataDir = "/d"
			c.Server.Enabled = true
			c.Server.BootstrapExpect = 3
			c.Server.Join = []string{"a:1"}
		}, "exclusive"},
		{"server with neither", func(c *Config) { c.DataDir = "/d"; c.Server.Enabled = true }, "-bootstrap-expect N"},
		{"empty join address", func(c *Config) { c.DataDir = "/d"; c.Server.Enabled = true; c.Server.Join = []string{" "} }, "server.join[0]"},
		{"unadvertisable raft bind", func(c *Config) {
			c.DataDir = "/d"
			c.Server.Enabled = true
			c.Server.BootstrapExpect = 1
			c.BindAddr = "0.0.0.0:4748"
		}, "server.advertise_raft"},
		{"unadvertisable http address", func(c *Config) {
			c.DataDir = "/d"
			c.Server.Enabled = true
			c.Server.BootstrapExpect = 1
			c.HTTP.Address = ":4747"
		}, "server.advertise_http"},
		{"bad retry interval", func(c *Config) {
			c.DataDir = "/d"
			c.Server.Enabled = true
			c.Server.BootstrapExpect = 1
			c.Server.RetryMaxInterval = "soon"
		}, "server.retry_max_interval"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			tc.mod(cfg)
			_, err := cfg.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
	ok := DefaultConfig()
	ok.DataDir = "/d"
	ok.Server.Enabled = true
	ok.Server.BootstrapExpect = 3
	if _, err := ok.Validate(); err != nil {
		t.Fatalf("seed config refused: %v", err)
	}
	ok.BindAddr, ok.HTTP.Address = "0.0.0.0:4748", "0.0.0.0:4747"
	ok.Server.AdvertiseRaft, ok.Server.AdvertiseHTTP = "10.0.0.1:4748", "10.0.0.1:4747"
	if _, err := ok.Validate(); err != nil {
		t.Fatalf("advertised config refused: %v", err)
	}
}

// The server block's raft settings reach the cluster: the multiplier
// scales raft's three failure-detection timings, the snapshot policy and
// trailing logs pass through; out-of-range values are refused by name.
func TestServerRaftSettings(t *testing.T) {
	c, err := LoadConfigFile("testdata/server.hcl")
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Merge(c)
	d, err := cfg.Validate()
	if err != nil {
		t.Fatal(err)
	}
	var cc cluster.Config
	applyRaft(&cc, cfg.Server, d)
	if cc.HeartbeatTimeout != 5*time.Second || cc.ElectionTimeout != 5*time.Second || cc.LeaderLeaseTimeout != 2500*time.Millisecond {
		t.Fatalf("timings %s/%s/%s, want 5s/5s/2.5s", cc.HeartbeatTimeout, cc.ElectionTimeout, cc.LeaderLeaseTimeout)
	}
	if cc.SnapshotThreshold != 16384 || cc.SnapshotInterval != 5*time.Minute || cc.TrailingLogs != 20000 {
		t.Fatalf("snapshot policy %d/%s/%d", cc.SnapshotThreshold, cc.SnapshotInterval, cc.TrailingLogs)
	}
	// Unset: the cluster's defaults (zero values) stay.
	var def cluster.Config
	applyRaft(&def, &ServerConfig{}, Durations{})
	if def.HeartbeatTimeout != 0 || def.ElectionTimeout != 0 || def.LeaderLeaseTimeout != 0 || def.SnapshotThreshold != 0 ||
		def.SnapshotInterval != 0 || def.TrailingLogs != 0 {
		t.Fatalf("unset raft settings changed the cluster config: %+v", def)
	}
	for _, bad := range []struct {
		sv   ServerConfig
		want string
	}{
		{ServerConfig{RaftMultiplier: 11}, "server.raft_multiplier"},
		{ServerConfig{RaftMultiplier: -1}, "server.raft_multiplier"},
		{ServerConfig{RaftSnapshotThreshold: -1}, "server.raft_snapshot_threshold"},
		{ServerConfig{RaftTrailingLogs: -1}, "server.raft_trailing_logs"},
		{ServerConfig{RaftSnapshotInterval: "10ms"}, "server.raft_snapshot_interval"},
		{ServerConfig{RaftSnapshotInterval: "soon"}, "server.raft_snapshot_interval"},
	} {
		errs := bad.sv.validateRaft(&Durations{})
		if len(errs) != 1 || !strings.Contains(errs[0].Error(), bad.want) {
			t.Fatalf("%+v: errors %v, want one naming %s", bad.sv, errs, bad.want)
		}
	}
}
