package agent

import (
	"strings"
	"testing"
	"time"
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
