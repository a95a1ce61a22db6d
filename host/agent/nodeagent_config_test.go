package agent

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestClientConfigFile(t *testing.T) {
	file, err := LoadConfigFile("testdata/client.hcl")
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Merge(file)
	c := cfg.Client
	if c == nil || !c.Enabled || c.NodeID != "node1" || c.RootDir != "/var/lib/volhost-client" || len(c.Servers) != 2 ||
		len(c.Plugins) != 2 || c.Plugins[0].ID != "gce-pd" || c.Plugins[0].Socket != "unix:///run/csi/gce-pd.sock" ||
		c.ProbeInterval != "15s" || c.ProbeTimeout != "3s" {
		t.Fatalf("client = %+v", c)
	}
}

func TestNodeRPCSettingsAreValidated(t *testing.T) {
	for _, tc := range []struct {
		name string
		nr   NodeRPCConfig
		want string // "" valid
	}{
		{"defaults", NodeRPCConfig{Address: "127.0.0.1:4749"}, ""},
		{"tuned", NodeRPCConfig{Address: "0.0.0.0:4749", HeartbeatInterval: "2s", HeartbeatTTL: "10s", NodeGCThreshold: "1h"}, ""},
		{"bad ttl", NodeRPCConfig{Address: "127.0.0.1:4749", HeartbeatTTL: "soon"}, "node_rpc.heartbeat_ttl"},
		{"negative gc", NodeRPCConfig{Address: "127.0.0.1:4749", NodeGCThreshold: "-1h"}, "node_rpc.node_gc_threshold"},
		{"interval not below ttl", NodeRPCConfig{Address: "127.0.0.1:4749", HeartbeatInterval: "30s", HeartbeatTTL: "30s"}, "must be shorter than heartbeat_ttl"},
		{"no port", NodeRPCConfig{Address: "localhost"}, "node_rpc.address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := tc.nr.durations()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("err = %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("err = %v, want one naming %s", err, tc.want)
			case tc.want == "" && d.Grace != d.TTL:
				t.Fatalf("grace %s, want the TTL %s by default", d.Grace, d.TTL)
			}
		})
	}
	if d, _ := (&NodeRPCConfig{Address: "127.0.0.1:1"}).durations(); d.TTL != 30*time.Second || d.Interval != 10*time.Second || d.GCThreshold != 24*time.Hour {
		t.Fatalf("defaults = %+v", d)
	}
}

// A client block without what an agent needs fails at once, naming each
// missing setting, before anything connects.
func TestRunClientRefusesIncompleteConfig(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Client = &ClientConfig{Enabled: true}
	err := RunClient(context.Background(), cfg)
	for _, want := range []string{"client.node_id", "client.servers", "client.root_dir", "plugin"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v, want it to name %s", err, want)
		}
	}
}

// The probe settings reach the agent parsed, and a bad one is refused
// naming its key before anything connects.
func TestClientProbeSettings(t *testing.T) {
	for _, tc := range []struct {
		name              string
		c                 ClientConfig
		interval, timeout time.Duration
		want              string // "" valid
	}{
		{"defaults", ClientConfig{}, 10 * time.Second, 5 * time.Second, ""},
		{"tuned", ClientConfig{ProbeInterval: "30s", ProbeTimeout: "20s"}, 30 * time.Second, 20 * time.Second, ""},
		{"timeout alone", ClientConfig{ProbeTimeout: "2s"}, 10 * time.Second, 2 * time.Second, ""},
		{"bad interval", ClientConfig{ProbeInterval: "often"}, 0, 0, "client.probe_interval"},
		{"zero timeout", ClientConfig{ProbeTimeout: "0s"}, 0, 0, "client.probe_timeout"},
		{"timeout past the default interval", ClientConfig{ProbeTimeout: "20s"}, 0, 0, "must not be longer than probe_interval"},
		{"timeout past the interval", ClientConfig{ProbeInterval: "2s", ProbeTimeout: "3s"}, 0, 0, "must not be longer than probe_interval"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			interval, timeout, err := tc.c.probeDurations()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("err = %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("err = %v, want one naming %s", err, tc.want)
			case tc.want == "" && (interval != tc.interval || timeout != tc.timeout):
				t.Fatalf("interval, timeout = %s, %s; want %s, %s", interval, timeout, tc.interval, tc.timeout)
			}
		})
	}
	cfg := DefaultConfig()
	cfg.Client = &ClientConfig{Enabled: true, NodeID: "n1", Servers: []string{"127.0.0.1:1"}, RootDir: t.TempDir(),
		Plugins: []*ClientPlugin{{ID: "p", Socket: "unix:///nonexistent.sock"}}, ProbeInterval: "never"}
	if err := RunClient(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "client.probe_interval") {
		t.Fatalf("RunClient: err = %v, want the bad probe_interval named", err)
	}
}
