package agent

import (
	"strings"
	"testing"
)

func TestSecurityConfig(t *testing.T) {
	file, err := LoadConfigFile("testdata/secure.hcl")
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Merge(file)
	if _, err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if !cfg.ACL.Enabled || cfg.Region != "eu" || !cfg.TLS.HTTP || !cfg.TLS.RPC || !cfg.TLS.VerifyServerHostname ||
		!cfg.TLS.VerifyHTTPSClient || cfg.TLS.CAFile != "/etc/volhost/ca.pem" {
		t.Fatalf("security settings not applied: acl %+v tls %+v region %q", cfg.ACL, cfg.TLS, cfg.Region)
	}
	if d := DefaultConfig(); d.ACL.Enabled || d.TLS.HTTP {
		t.Fatal("ACL or TLS on by default")
	}
	for _, c := range []struct {
		edit func(*Config)
		want string
	}{
		{func(c *Config) { c.TLS.CertFile = "" }, "needs ca_file, cert_file and key_file"},
		{func(c *Config) { c.TLS.HTTP = false; c.TLS.VerifyHTTPSClient = false }, "server.join_token"},
		{func(c *Config) { c.TLS.HTTP = false; c.Server.Join = nil; c.Server.BootstrapExpect = 3 }, "bootstrap_expect > 1 needs tls.http"},
		{func(c *Config) { c.TLS.HTTP = false }, "verify_https_client needs tls.http"},
		{func(c *Config) { c.Server.Enabled = false; c.Server.Join = nil; c.DataDir = ""; c.Dev = true }, "tls.rpc needs -data-dir"},
	} {
		cfg := DefaultConfig()
		cfg.Merge(file)
		c.edit(cfg)
		if _, err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate: %v, want %q", err, c.want)
		}
	}
	cfg = DefaultConfig()
	cfg.Merge(file)
	cfg.TLS.HTTP, cfg.TLS.VerifyHTTPSClient, cfg.Server.JoinToken = false, false, "secret"
	if _, err := cfg.Validate(); err != nil {
		t.Fatalf("ACL join with a join token and no HTTPS: %v", err)
	}
}
