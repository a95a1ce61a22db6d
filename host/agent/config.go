// Package agent wires a volhost server process together: configuration
// (HCL), the state store, the replicated log, CSI clients, the HTTP API, the
// metrics registry and the leader-only watcher, and the leadership loop that
// enables the watcher on step-up and disables it on step-down.
package agent

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	hclog "github.com/hashicorp/go-hclog"
	"github.com/hashicorp/hcl/v2/hclsimple"

	"github.com/volhost/volhost/host/scheduler/nomad"
	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/plugins"
)

// Config is the agent configuration, read from HCL files and flags.
type Config struct {
	// Dev keeps everything in memory: a single-node leader for trying volhost.
	Dev bool `hcl:"dev,optional"`
	// DataDir persists the raft log and snapshots (a single-node cluster by default).
	DataDir   string `hcl:"data_dir,optional"`
	NodeID    string `hcl:"node_id,optional"`
	BindAddr  string `hcl:"bind_addr,optional"`
	LogLevel  string `hcl:"log_level,optional"`
	LogJSON   bool   `hcl:"log_json,optional"`
	ModuleDir string `hcl:"module_dir,optional"`
	// ModuleCacheDir is wazero's on-disk compilation cache (default: under
	// data_dir, else the user's cache directory), so a restart does not
	// recompile every module. It holds native code the agent runs: one
	// another user owns or may write is refused (plugins/cachedir.go).
	ModuleCacheDir string `hcl:"module_cache_dir,optional"`

	HTTP        *HTTPConfig        `hcl:"http,block"`
	Server      *ServerConfig      `hcl:"server,block"`
	Watcher     *WatcherConfig     `hcl:"watcher,block"`
	EscapeHatch *EscapeHatchConfig `hcl:"escape_hatch,block"`
	// ModuleLimits are the host's maxima over every module's manifest and
	// file (RATIONALE "Modules"): a manifest asking for more is refused,
	// naming the limit.
	ModuleLimits *ModuleLimitsConfig `hcl:"module_limits,block"`
	// ModuleSources pull modules from signed OCI bundles.
	ModuleSources []ModuleSourceConfig `hcl:"module_source,block"`
	// Schedulers are the scheduler sources the leader mirrors (scheduler
	// "nomad" { ... }: host/scheduler/nomad).
	Schedulers []SchedulerConfig `hcl:"scheduler,block"`
	// Region names this cluster's servers in TLS certificates
	// (server.<region>.volhost; default "global").
	Region string        `hcl:"region,optional"`
	ACL    *ACLConfig    `hcl:"acl,block"`
	TLS    *TLSConfig    `hcl:"tls,block"`
	Events *EventsConfig `hcl:"events,block"`
	// NodeRPC is where servers listen for node agents; Client
	// runs this process as a node agent instead of a server.
	NodeRPC *NodeRPCConfig `hcl:"node_rpc,block"`
	Client  *ClientConfig  `hcl:"client,block"`
}

// ModuleLimitsConfig bounds what a module manifest may ask for. Zero or
// empty settings take plugins' defaults (10s, 16384 pages, 2^20 table
// elements, 64MiB).
type ModuleLimitsConfig struct {
	MaxCallTimeout   string `hcl:"max_call_timeout,optional"`
	MaxMemoryPages   int64  `hcl:"max_memory_pages,optional"`
	MaxTableElements int64  `hcl:"max_table_elements,optional"`
	// MaxModuleSize is a byte size: "64MiB", "512KiB", "1000000".
	MaxModuleSize string `hcl:"max_module_size,optional"`
	// RequireSHA256 refuses manifests without a sha256 pin, so code and
	// manifest can only swap as one (README "Hot swap").
	RequireSHA256 bool `hcl:"require_sha256,optional"`
}

// ACLConfig turns on access control: every request needs a
// token whose policies grant the route's capability (README "Securing a
// cluster").
type ACLConfig struct {
	Enabled bool `hcl:"enabled,optional"`
}

// TLSConfig turns on TLS: HTTPS for the API (http), mutual TLS
// for raft (rpc). The files reload on SIGHUP.
type TLSConfig struct {
	HTTP     bool   `hcl:"http,optional"`
	RPC      bool   `hcl:"rpc,optional"`
	CAFile   string `hcl:"ca_file,optional"`
	CertFile string `hcl:"cert_file,optional"`
	KeyFile  string `hcl:"key_file,optional"`
	// VerifyServerHostname is kept so configs that set it still load:
	// servers' certificates must name server.<region>.volhost whatever it
	// says (raft, joins, forwarding and node agents' dials), since a
	// client certificate posing as a server could commit raft entries.
	VerifyServerHostname bool `hcl:"verify_server_hostname,optional"`
	// VerifyHTTPSClient requires a client certificate on the HTTPS API.
	VerifyHTTPSClient bool `hcl:"verify_https_client,optional"`
}

// HTTPConfig configures the HTTP API.
type HTTPConfig struct {
	Address      string `hcl:"address,optional"`
	MaxBodyBytes int64  `hcl:"max_body_bytes,optional"`
	// Resource limits and browser guards (limits_config.go; 0 or empty
	// takes the API's default).
	AllowedHosts       []string `hcl:"allowed_hosts,optional"`
	MaxConns           int      `hcl:"max_conns,optional"`
	MaxConnsPerClient  int      `hcl:"max_conns_per_client,optional"`
	MaxBlockingQueries int      `hcl:"max_blocking_queries,optional"`
	MaxPerPage         int      `hcl:"max_per_page,optional"`
	ReadTimeout        string   `hcl:"read_timeout,optional"`
	WriteTimeout       string   `hcl:"write_timeout,optional"`
	IdleTimeout        string   `hcl:"idle_timeout,optional"`
}

// ServerConfig makes the agent one server of a multi-server raft cluster
// (README "Running a cluster"). Exactly one server (the seed) sets bootstrap_expect = N; the
// others set join to any server's HTTP address. See RATIONALE.md "Cluster".
type ServerConfig struct {
	Enabled         bool     `hcl:"enabled,optional"`
	BootstrapExpect int      `hcl:"bootstrap_expect,optional"`
	Join            []string `hcl:"join,optional"`
	// JoinToken is a management token secret this server presents when it
	// joins (with ACLs on and no mutual TLS server certificate).
	JoinToken string `hcl:"join_token,optional"`
	// RetryMaxInterval caps the retry-join backoff (Go duration).
	RetryMaxInterval string `hcl:"retry_max_interval,optional"`
	// AdvertiseRaft and AdvertiseHTTP are the addresses other servers
	// reach this one at, when bind_addr or http.address listen on all
	// interfaces (0.0.0.0).
	AdvertiseRaft string `hcl:"advertise_raft,optional"`
	AdvertiseHTTP string `hcl:"advertise_http,optional"`
	// Raft's timings and snapshot policy for large states (raft_config.go).
	RaftMultiplier        int    `hcl:"raft_multiplier,optional"`
	RaftSnapshotThreshold int    `hcl:"raft_snapshot_threshold,optional"`
	RaftSnapshotInterval  string `hcl:"raft_snapshot_interval,optional"`
	RaftTrailingLogs      int    `hcl:"raft_trailing_logs,optional"`
}

// WatcherConfig tunes claim release. Durations are Go duration strings.
type WatcherConfig struct {
	MaxConcurrency        int    `hcl:"max_concurrency,optional"`
	ControllerConcurrency int    `hcl:"controller_concurrency,optional"`
	IdleTimeout           string `hcl:"idle_timeout,optional"`
	BackoffBase           string `hcl:"backoff_base,optional"`
	BackoffMax            string `hcl:"backoff_max,optional"`
	MaxAttempts           int    `hcl:"max_attempts,optional"`
	StuckAfter            string `hcl:"stuck_after,optional"`
	CSITimeout            string `hcl:"csi_timeout,optional"`
	GCInterval            string `hcl:"gc_interval,optional"`
	GCThreshold           string `hcl:"gc_threshold,optional"`
	// MaxRetryAfter caps the retry_after a module may ask for.
	MaxRetryAfter string `hcl:"max_retry_after,optional"`
	// AbandonAfter is how many failed attempts a claim no CSI call can
	// release makes before it is abandoned with a reason (default 3).
	AbandonAfter int `hcl:"abandon_after,optional"`
	// VolumeRateLimit, when > 0, caps release passes per volume per second
	// with VolumeRateBurst: the reference system's setting (1/s, burst 3),
	// kept for comparison runs such as `make bench`'s baseline.
	VolumeRateLimit float64 `hcl:"volume_rate_limit,optional"`
	VolumeRateBurst int     `hcl:"volume_rate_burst,optional"`
}

// EscapeHatchConfig is the opt-in automatic force-deregister of stuck volumes.
type EscapeHatchConfig struct {
	AutoForceDeregister bool   `hcl:"auto_force_deregister,optional"`
	After               string `hcl:"after,optional"`
}

// DefaultConfig is what an agent runs with when nothing is set.
func DefaultConfig() *Config {
	return &Config{
		NodeID:   "volhost-1",
		BindAddr: "127.0.0.1:4748",
		LogLevel: "info",
		HTTP:     &HTTPConfig{Address: "127.0.0.1:4747", MaxBodyBytes: 1 << 20},
		Server:   &ServerConfig{RetryMaxInterval: "30s"},
		Watcher: &WatcherConfig{
			MaxConcurrency:        16,
			ControllerConcurrency: 1,
			IdleTimeout:           "5m",
			BackoffBase:           "1s",
			BackoffMax:            "1m",
			StuckAfter:            "1h",
			CSITimeout:            "2m",
			GCInterval:            "5m",
			GCThreshold:           "5m",
			MaxRetryAfter:         "1h",
		},
		EscapeHatch: &EscapeHatchConfig{After: "15m"},
		Region:      "global",
		ACL:         &ACLConfig{},
		TLS:         &TLSConfig{},
	}
}

// LoadConfigFile parses one HCL file. Unknown attributes and blocks are
// errors naming file, line and attribute (hclsimple reports them).
func LoadConfigFile(path string) (*Config, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading config: %w", err)
	}
	return ParseConfig(path, src)
}

// ParseConfig parses one HCL configuration file's contents; path names
// it in errors (and its extension picks HCL or JSON syntax, as hclsimple
// does).
func ParseConfig(path string, src []byte) (*Config, error) {
	var c Config
	if err := hclsimple.Decode(path, src, nil, &c); err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return &c, nil
}

// Merge overlays the values set in o onto c (later files and flags win).
func (c *Config) Merge(o *Config) {
	if o == nil {
		return
	}
	c.Dev = c.Dev || o.Dev
	c.LogJSON = c.LogJSON || o.LogJSON
	setString(&c.DataDir, o.DataDir)
	setString(&c.NodeID, o.NodeID)
	setString(&c.BindAddr, o.BindAddr)
	setString(&c.LogLevel, o.LogLevel)
	setString(&c.ModuleDir, o.ModuleDir)
	setString(&c.ModuleCacheDir, o.ModuleCacheDir)
	if o.HTTP != nil {
		setString(&c.HTTP.Address, o.HTTP.Address)
		if o.HTTP.MaxBodyBytes != 0 {
			c.HTTP.MaxBodyBytes = o.HTTP.MaxBodyBytes
		}
		mergeHTTPLimits(c.HTTP, o.HTTP)
	}
	mergeEvents(c, o.Events)
	mergeNodeAgent(c, o)
	if sv := o.Server; sv != nil {
		if c.Server == nil {
			c.Server = &ServerConfig{}
		}
		c.Server.Enabled = c.Server.Enabled || sv.Enabled
		setInt(&c.Server.BootstrapExpect, sv.BootstrapExpect)
		if len(sv.Join) > 0 {
			c.Server.Join = append([]string(nil), sv.Join...)
		}
		setString(&c.Server.RetryMaxInterval, sv.RetryMaxInterval)
		setString(&c.Server.JoinToken, sv.JoinToken)
		setString(&c.Server.AdvertiseRaft, sv.AdvertiseRaft)
		setString(&c.Server.AdvertiseHTTP, sv.AdvertiseHTTP)
		mergeRaft(c.Server, sv)
	}
	if w := o.Watcher; w != nil {
		setInt(&c.Watcher.MaxConcurrency, w.MaxConcurrency)
		setInt(&c.Watcher.ControllerConcurrency, w.ControllerConcurrency)
		setInt(&c.Watcher.MaxAttempts, w.MaxAttempts)
		setInt(&c.Watcher.AbandonAfter, w.AbandonAfter)
		setString(&c.Watcher.IdleTimeout, w.IdleTimeout)
		setString(&c.Watcher.BackoffBase, w.BackoffBase)
		setString(&c.Watcher.BackoffMax, w.BackoffMax)
		setString(&c.Watcher.StuckAfter, w.StuckAfter)
		setString(&c.Watcher.CSITimeout, w.CSITimeout)
		setString(&c.Watcher.GCInterval, w.GCInterval)
		setString(&c.Watcher.GCThreshold, w.GCThreshold)
		setString(&c.Watcher.MaxRetryAfter, w.MaxRetryAfter)
		if w.VolumeRateLimit != 0 {
			c.Watcher.VolumeRateLimit = w.VolumeRateLimit
		}
		setInt(&c.Watcher.VolumeRateBurst, w.VolumeRateBurst)
	}
	setString(&c.Region, o.Region)
	if a := o.ACL; a != nil {
		if c.ACL == nil {
			c.ACL = &ACLConfig{}
		}
		c.ACL.Enabled = c.ACL.Enabled || a.Enabled
	}
	if t := o.TLS; t != nil {
		if c.TLS == nil {
			c.TLS = &TLSConfig{}
		}
		c.TLS.HTTP = c.TLS.HTTP || t.HTTP
		c.TLS.RPC = c.TLS.RPC || t.RPC
		c.TLS.VerifyServerHostname = c.TLS.VerifyServerHostname || t.VerifyServerHostname
		c.TLS.VerifyHTTPSClient = c.TLS.VerifyHTTPSClient || t.VerifyHTTPSClient
		setString(&c.TLS.CAFile, t.CAFile)
		setString(&c.TLS.CertFile, t.CertFile)
		setString(&c.TLS.KeyFile, t.KeyFile)
	}
	c.ModuleSources = append(c.ModuleSources, o.ModuleSources...)
	c.Schedulers = append(c.Schedulers, o.Schedulers...)
	if e := o.EscapeHatch; e != nil {
		c.EscapeHatch.AutoForceDeregister = c.EscapeHatch.AutoForceDeregister || e.AutoForceDeregister
		setString(&c.EscapeHatch.After, e.After)
	}
	if ml := o.ModuleLimits; ml != nil {
		if c.ModuleLimits == nil {
			c.ModuleLimits = &ModuleLimitsConfig{}
		}
		setString(&c.ModuleLimits.MaxCallTimeout, ml.MaxCallTimeout)
		setString(&c.ModuleLimits.MaxModuleSize, ml.MaxModuleSize)
		if ml.MaxMemoryPages != 0 {
			c.ModuleLimits.MaxMemoryPages = ml.MaxMemoryPages
		}
		if ml.MaxTableElements != 0 {
			c.ModuleLimits.MaxTableElements = ml.MaxTableElements
		}
		c.ModuleLimits.RequireSHA256 = c.ModuleLimits.RequireSHA256 || ml.RequireSHA256
	}
}

// Durations are the parsed duration settings.
type Durations struct {
	IdleTimeout, BackoffBase, BackoffMax, StuckAfter, CSITimeout, GCInterval, GCThreshold, EscapeAfter time.Duration
	RetryMaxInterval, MaxRetryAfter                                                                    time.Duration
	// RaftSnapshotInterval is server.raft_snapshot_interval (0: raft's).
	RaftSnapshotInterval time.Duration
	// ModuleMaxima are module_limits, parsed.
	ModuleMaxima plugins.Maxima
	// moduleSources are the module_source blocks, checked.
	moduleSources []moduleSource
	// nomad is the scheduler "nomad" block, checked (nil: none).
	nomad *nomad.Settings
	// HTTP timeouts (0: the API's defaults).
	HTTPRead, HTTPWrite, HTTPIdle time.Duration
}

// optionalDuration parses an optional duration setting into dst: empty
// keeps what dst holds (the default), anything but a positive duration is
// an error naming the setting's key.
func optionalDuration(key, v string, dst *time.Duration) error {
	if v == "" {
		return nil
	}
	p, err := time.ParseDuration(v)
	if err != nil || p <= 0 {
		return fmt.Errorf("%s: %q is not a positive duration (e.g. \"30s\")", key, v)
	}
	*dst = p
	return nil
}

// Validate checks the merged configuration and parses its durations; the
// error names every offending setting.
func (c *Config) Validate() (Durations, error) {
	var d Durations
	var errs []error
	if err := validLogLevel(c.LogLevel); err != nil {
		errs = append(errs, err)
	}
	parse := func(name, v string, dst *time.Duration) {
		p, err := time.ParseDuration(v)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("%s: %q is not a duration (e.g. \"30s\", \"5m\")", name, v))
		case p <= 0:
			errs = append(errs, fmt.Errorf("%s: must be positive, got %q", name, v))
		default:
			*dst = p
		}
	}
	w := c.Watcher
	parse("watcher.idle_timeout", w.IdleTimeout, &d.IdleTimeout)
	parse("watcher.backoff_base", w.BackoffBase, &d.BackoffBase)
	parse("watcher.backoff_max", w.BackoffMax, &d.BackoffMax)
	parse("watcher.stuck_after", w.StuckAfter, &d.StuckAfter)
	parse("watcher.csi_timeout", w.CSITimeout, &d.CSITimeout)
	parse("watcher.gc_interval", w.GCInterval, &d.GCInterval)
	parse("watcher.gc_threshold", w.GCThreshold, &d.GCThreshold)
	parse("watcher.max_retry_after", w.MaxRetryAfter, &d.MaxRetryAfter)
	parse("escape_hatch.after", c.EscapeHatch.After, &d.EscapeAfter)
	if w.MaxConcurrency < 1 {
		errs = append(errs, fmt.Errorf("watcher.max_concurrency: must be at least 1, got %d", w.MaxConcurrency))
	}
	if w.ControllerConcurrency < 1 {
		errs = append(errs, fmt.Errorf("watcher.controller_concurrency: must be at least 1, got %d", w.ControllerConcurrency))
	}
	if w.VolumeRateLimit < 0 || w.VolumeRateBurst < 0 {
		errs = append(errs, fmt.Errorf("watcher.volume_rate_limit (%g) and volume_rate_burst (%d): must not be negative", w.VolumeRateLimit, w.VolumeRateBurst))
	}
	if w.AbandonAfter < 0 {
		errs = append(errs, fmt.Errorf("watcher.abandon_after: must not be negative, got %d", w.AbandonAfter))
	}
	if w.MaxAttempts < 0 {
		errs = append(errs, fmt.Errorf("watcher.max_attempts: must not be negative, got %d", w.MaxAttempts))
	}
	if d.BackoffMax > 0 && d.BackoffBase > d.BackoffMax {
		errs = append(errs, fmt.Errorf("watcher.backoff_base (%s) exceeds watcher.backoff_max (%s)", d.BackoffBase, d.BackoffMax))
	}
	if c.Dev && c.DataDir != "" {
		errs = append(errs, errors.New("dev and data_dir are exclusive: -dev keeps everything in memory"))
	}
	if !c.Dev && c.DataDir == "" {
		errs = append(errs, errors.New("set -dev (in memory) or -data-dir DIR (persistent)"))
	}
	if sv := c.Server; sv != nil {
		if sv.RetryMaxInterval != "" {
			parse("server.retry_max_interval", sv.RetryMaxInterval, &d.RetryMaxInterval)
		}
		errs = append(errs, sv.validateRaft(&d)...)
		switch {
		case sv.BootstrapExpect < 0:
			errs = append(errs, fmt.Errorf("server.bootstrap_expect: must not be negative, got %d", sv.BootstrapExpect))
		case !sv.Enabled && (sv.BootstrapExpect > 0 || len(sv.Join) > 0):
			errs = append(errs, errors.New("server.bootstrap_expect and server.join need server mode (-server or server { enabled = true })"))
		case sv.Enabled && c.Dev:
			errs = append(errs, errors.New("server mode needs -data-dir: -dev keeps one in-memory node that no other server can reach"))
		case sv.Enabled && sv.BootstrapExpect > 1 && len(sv.Join) > 0:
			errs = append(errs, errors.New("server.bootstrap_expect > 1 and server.join are exclusive: the seed waits for the others to join it; set join on the others"))
		case sv.Enabled && sv.BootstrapExpect == 0 && len(sv.Join) == 0:
			errs = append(errs, errors.New("server mode needs -bootstrap-expect N (on the seed server) or -join ADDR (on the others)"))
		}
		if sv.Enabled && sv.AdvertiseRaft == "" && unspecifiedHost(c.BindAddr) {
			errs = append(errs, fmt.Errorf("bind_addr %q listens on all interfaces: set server.advertise_raft (-advertise-raft) to the address other servers reach this one at", c.BindAddr))
		}
		if sv.Enabled && sv.AdvertiseHTTP == "" && unspecifiedHost(c.HTTP.Address) {
			errs = append(errs, fmt.Errorf("http.address %q listens on all interfaces: set server.advertise_http (-advertise-http) to the address other servers forward requests to", c.HTTP.Address))
		}
		for i, j := range sv.Join {
			if strings.TrimSpace(j) == "" {
				errs = append(errs, fmt.Errorf("server.join[%d]: empty address", i))
			}
		}
	}
	if t := c.TLS; t != nil && (t.HTTP || t.RPC) {
		if t.CAFile == "" || t.CertFile == "" || t.KeyFile == "" {
			errs = append(errs, errors.New("tls: http or rpc needs ca_file, cert_file and key_file (volhost tls ca create; volhost tls cert create -server)"))
		}
		if t.RPC && c.Dev {
			errs = append(errs, errors.New("tls.rpc needs -data-dir: -dev's raft transport is in memory"))
		}
	}
	if sv := c.Server; sv != nil && sv.Enabled && c.ACL != nil && c.ACL.Enabled && (c.TLS == nil || !c.TLS.HTTP) {
		// A join must be authorized: by a server certificate
		// over HTTPS, or by a management token, which exists only once
		// the cluster is formed and bootstrapped.
		switch {
		case sv.BootstrapExpect > 1:
			errs = append(errs, errors.New("acl.enabled with server.bootstrap_expect > 1 needs tls.http: the servers authorize their joins with their server certificates (no token exists before the cluster forms)"))
		case len(sv.Join) > 0 && sv.JoinToken == "":
			errs = append(errs, errors.New("acl.enabled with server.join needs tls.http (joins authorized by the server certificate) or server.join_token (a management token)"))
		}
	}
	if t := c.TLS; t != nil && t.VerifyHTTPSClient && !t.HTTP {
		errs = append(errs, errors.New("tls.verify_https_client needs tls.http = true"))
	}
	if c.HTTP.MaxBodyBytes <= 0 {
		errs = append(errs, fmt.Errorf("http.max_body_bytes: must be positive, got %d", c.HTTP.MaxBodyBytes))
	}
	if ml := c.ModuleLimits; ml != nil {
		x := &d.ModuleMaxima
		x.RequireSHA256 = ml.RequireSHA256
		if ml.MaxCallTimeout != "" {
			parse("module_limits.max_call_timeout", ml.MaxCallTimeout, &x.CallTimeout)
		}
		switch {
		case ml.MaxMemoryPages < 0 || ml.MaxMemoryPages > 65536:
			errs = append(errs, fmt.Errorf("module_limits.max_memory_pages: must be between 1 and 65536 (64 KiB pages), got %d", ml.MaxMemoryPages))
		default:
			x.MemoryPages = uint32(ml.MaxMemoryPages)
		}
		switch {
		case ml.MaxTableElements < 0 || ml.MaxTableElements > 1<<32-1:
			errs = append(errs, fmt.Errorf("module_limits.max_table_elements: must be between 1 and %d, got %d", uint32(1<<32-1), ml.MaxTableElements))
		default:
			x.TableElements = uint32(ml.MaxTableElements)
		}
		if ml.MaxModuleSize != "" {
			n, err := parseByteSize(ml.MaxModuleSize)
			if err != nil {
				errs = append(errs, fmt.Errorf("module_limits.max_module_size: %w", err))
			}
			x.ModuleSize = n
		}
	}
	errs = append(errs, c.validateLimits(&d)...)
	var serr []error
	d.moduleSources, serr = c.validateSources()
	errs = append(errs, serr...)
	var err error
	if d.nomad, err = c.validateSchedulers(); err != nil {
		errs = append(errs, err)
	}
	return d, errors.Join(errs...)
}

// parseByteSize reads "64MiB", "512KiB", "1GiB" or a plain byte count.
func parseByteSize(s string) (int64, error) {
	num, mult := strings.TrimSpace(s), int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}} {
		if n, ok := strings.CutSuffix(num, u.suffix); ok {
			num, mult = strings.TrimSpace(n), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n <= 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("%q is not a positive size (e.g. \"64MiB\", \"512KiB\", \"1000000\")", s)
	}
	return n * mult, nil
}

// unspecifiedHost reports whether addr listens on every interface, which
// is no address another server can dial.
func unspecifiedHost(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return host == "" || (ip != nil && ip.IsUnspecified())
}

func setString(dst *string, v string) {
	if v != "" {
		*dst = v
	}
}

func setInt(dst *int, v int) {
	if v != 0 {
		*dst = v
	}
}

// LogLevels are the values log_level (-log-level) takes.
var LogLevels = []string{"trace", "debug", "info", "warn", "error", "off"}

// validLogLevel refuses a log level hclog does not know: it would read it
// as "no level" and log at info, so -log-level=verbose was accepted silently.
func validLogLevel(level string) error {
	if level == "" || hclog.LevelFromString(level) != hclog.NoLevel {
		return nil
	}
	return fmt.Errorf("log_level (-log-level) must be one of %s, got %q", structs.Choices(LogLevels...), level)
}
