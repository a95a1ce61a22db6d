package agent

import (
	"strings"
	"testing"
	"time"
)

// TestSchedulerConfig: the scheduler "nomad" block, its defaults, and the
// mistakes an operator makes refused at start with the setting named.
func TestSchedulerConfig(t *testing.T) {
	c, err := ParseConfig("a.hcl", []byte(`
dev = true
scheduler "nomad" {
  address         = "https://nomad.example:4646"
  token           = "secret"
  region          = "eu"
  namespaces      = ["prod", "ops"]
  node_id         = "id"
  relist_interval = "15s"
  tls {
    ca_cert = "/etc/nomad/ca.pem"
  }
}
`))
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Merge(c)
	d, err := cfg.Validate()
	if err != nil {
		t.Fatal(err)
	}
	s := d.nomad
	if s == nil || s.Address != "https://nomad.example:4646" || s.Token != "secret" || s.Region != "eu" || s.NodeID != "id" ||
		strings.Join(s.Namespaces, ",") != "prod,ops" || s.Relist != 15*time.Second || s.TLS == nil || s.TLS.CACert != "/etc/nomad/ca.pem" {
		t.Fatalf("settings = %+v", s)
	}
	for _, tc := range []struct{ src, want string }{
		{`scheduler "kubernetes" {}`, `unknown scheduler`},
		{"scheduler \"nomad\" {}\nscheduler \"nomad\" {}", "appears twice"},
		{`scheduler "nomad" { node_id = "hostname" }`, `node_id must be "name" or "id"`},
		{`scheduler "nomad" { relist_interval = "often" }`, "relist_interval"},
		{`scheduler "nomad" { adress = "x" }`, "adress"},
	} {
		c, err := ParseConfig("b.hcl", []byte("dev = true\n"+tc.src))
		if err == nil {
			cfg := DefaultConfig()
			cfg.Merge(c)
			_, err = cfg.Validate()
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.src, err, tc.want)
		}
	}
}
