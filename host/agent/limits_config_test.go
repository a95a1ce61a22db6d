package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/volhost/volhost/host/api"
)

func TestLimitsConfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "limits.hcl")
	src := `
dev = true
http {
  allowed_hosts        = ["volhost.internal"]
  max_conns            = 5000
  max_conns_per_client = 50
  max_blocking_queries = 256
  max_per_page         = 200
  read_timeout         = "20s"
  write_timeout        = "40s"
  idle_timeout         = "1m"
}
events {
  per_volume        = 25
  global            = 500
  audit             = 2000
  max_volume_events = 50000
}
`
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	fc, err := LoadConfigFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Merge(fc)
	d, err := cfg.Validate()
	if err != nil {
		t.Fatal(err)
	}
	var ac api.Config
	cfg.apiLimits(&ac, d)
	if ac.MaxConns != 5000 || ac.MaxConnsPerClient != 50 || ac.MaxBlockingQueries != 256 || ac.MaxPerPage != 200 ||
		ac.ReadTimeout != 20*time.Second || ac.WriteTimeout != 40*time.Second || ac.IdleTimeout != time.Minute ||
		len(ac.AllowedHosts) != 1 || ac.AllowedHosts[0] != "volhost.internal" {
		t.Fatalf("api limits: %+v", ac)
	}
	if e := cfg.Events; e.PerVolume != 25 || e.Global != 500 || e.Audit != 2000 || e.MaxVolumeEvents != 50000 {
		t.Fatalf("events: %+v", e)
	}
	if len(cfg.storeOptions()) != 1 {
		t.Fatal("retention not passed to the store")
	}

	cfg.HTTP.ReadTimeout = "soon"
	cfg.Events.PerVolume = -1
	_, err = cfg.Validate()
	if err == nil || !strings.Contains(err.Error(), "http.read_timeout") || !strings.Contains(err.Error(), "events.per_volume") {
		t.Fatalf("bad limits: %v", err)
	}
}
