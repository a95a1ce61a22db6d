package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/jonboulle/clockwork"
	"golang.org/x/time/rate"

	"github.com/volhost/volhost/host/acl"
	"github.com/volhost/volhost/host/api"
	"github.com/volhost/volhost/host/cluster"
	"github.com/volhost/volhost/host/csi"
	"github.com/volhost/volhost/host/metrics"
	"github.com/volhost/volhost/host/nodeconn"
	"github.com/volhost/volhost/host/nodestep"
	"github.com/volhost/volhost/host/scheduler"
	"github.com/volhost/volhost/host/server"
	"github.com/volhost/volhost/host/state"
	"github.com/volhost/volhost/host/tlsutil"
	"github.com/volhost/volhost/plugins"
	"github.com/volhost/volhost/watcher"
	"github.com/volhost/volhost/watcher/attach"
)

// Agent is one running volhost server.
type Agent struct {
	cfg    *Config
	logger hclog.Logger
	clock  clockwork.Clock

	Store   *state.Store
	Cluster *cluster.Cluster
	CSI     *csi.Client
	Metrics *metrics.Metrics
	Server  *server.Server
	Watcher *watcher.Watcher
	API     *api.Server
	// Modules is the Wasm module runtime; nil without a module directory.
	Modules *plugins.Manager

	moduleEvents *moduleEvents
	moduleSwaps  *moduleSwaps
	// modulesReady is closed once the module directory's first load is
	// done (modules_loading.go); beforeFirstLoad, if set (tests), runs
	// before that load.
	modulesReady    chan struct{}
	beforeFirstLoad func()
	// sources are the module_source blocks (sources.go) and
	// moduleMaxima the module_limits they are pulled under.
	sources      []moduleSource
	moduleMaxima plugins.Maxima
	stop         context.CancelFunc
	wg           sync.WaitGroup

	retryJoinMax time.Duration

	// memory keeps the default soft memory limit in step with the live
	// heap (memlimit.go); nil when GOMEMLIMIT is set or
	// ApplyDefaultMemoryLimit was not called.
	memory *memoryGovernor

	// NodeRPC serves node agents and Tracker decides node down and gone
	// from their heartbeats; both nil without node_rpc.address.
	NodeRPC *nodeconn.Server
	Tracker *nodeconn.Tracker

	// Schedulers are the scheduler sources (scheduler blocks), run by
	// the leader only.
	Schedulers []scheduler.Source

	// TLS holds the certificates when tls.http or tls.rpc is on (reloaded
	// by ReloadTLS); ACL is the access control system when acl.enabled.
	TLS *tlsutil.Holder
	ACL *acl.Service

	rpcTransport raft.Transport // the mutual-TLS transport setupTLS made
	// lock holds data_dir against a second agent (lock.go); nil in -dev.
	lock *dirLock
}

// Options are the parts a test may replace.
type Options struct {
	Logger hclog.Logger
	Clock  clockwork.Clock
	// TuneCluster adjusts the replicated log's configuration before it
	// starts (tests: faster raft timings).
	TuneCluster func(*cluster.Config)
}

// New builds an agent from a validated configuration. Nothing runs until Run.
func New(cfg *Config, opts Options) (*Agent, error) {
	d, err := cfg.Validate()
	if err != nil {
		return nil, err
	}
	if opts.Logger == nil {
		opts.Logger = hclog.New(&hclog.LoggerOptions{
			Name: "volhost", Level: hclog.LevelFromString(cfg.LogLevel), JSONFormat: cfg.LogJSON,
		})
	}
	if opts.Clock == nil {
		opts.Clock = clockwork.NewRealClock()
	}
	a := &Agent{cfg: cfg, logger: opts.Logger, clock: opts.Clock}

	if cfg.DataDir != "" {
		// Before anything opens the raft files: a second agent on the same
		// directory fails here, at once, naming the holder.
		if a.lock, err = lockDataDir(cfg.DataDir); err != nil {
			return nil, err
		}
	}
	a.Store = state.NewStore(cfg.storeOptions()...)
	a.Metrics = metrics.New(a.Store)
	caller := cfg.NodeID
	if caller == "" {
		caller = cluster.DefaultNodeID
	}
	a.CSI = csi.New(csi.Config{CallTimeout: d.CSITimeout, Logger: a.logger.Named("csi"), Metrics: a.Metrics, Caller: caller})
	cc := cluster.Config{
		Dev:       cfg.Dev,
		DataDir:   cfg.DataDir,
		NodeID:    cfg.NodeID,
		BindAddr:  cfg.BindAddr,
		Bootstrap: true,
		Logger:    a.logger,
		Commits:   a.Metrics,
	}
	if sv := cfg.Server; sv != nil && sv.Enabled {
		// A server of a multi-server cluster: it bootstraps only
		// as the bootstrap_expect seed, otherwise it waits to be joined.
		cc.Server, cc.Bootstrap, cc.BootstrapExpect = true, false, sv.BootstrapExpect
		cc.AdvertiseAddr = sv.AdvertiseRaft
		a.retryJoinMax = d.RetryMaxInterval
		applyRaft(&cc, sv, d)
	}
	if err := a.setupTLS(&cc); err != nil {
		a.CSI.Close()
		return nil, err
	}
	if opts.TuneCluster != nil {
		opts.TuneCluster(&cc)
	}
	a.Cluster, err = cluster.New(cc, a.Store)
	if err != nil {
		a.CSI.Close()
		if cl, ok := cc.Transport.(io.Closer); ok && cc.Transport != nil {
			_ = cl.Close()
		}
		_ = a.lock.release()
		return nil, fmt.Errorf("starting the replicated log: %w", err)
	}
	a.setupProbe(cc)
	a.sources, a.moduleMaxima = d.moduleSources, d.ModuleMaxima.WithDefaults()
	modules, err := a.loadModules(d.ModuleMaxima)
	if err != nil {
		a.CSI.Close()
		return nil, errors.Join(err, a.Cluster.Shutdown(), a.lock.release())
	}
	// One set of volume locks for the claim path and the watcher's
	// per-node release steps (a release pass must not race a new claim on
	// the same node).
	locks := attach.NewVolumeLocks()
	if err := a.setupNodeRPC(); err != nil {
		a.CSI.Close()
		return nil, errors.Join(err, a.closeModules(context.Background()), a.Cluster.Shutdown(), a.lock.release())
	}
	// One route to the node agents for both directions.
	var agents attach.NodeAgents
	if a.NodeRPC != nil {
		agents = a.NodeRPC
	}
	// Direct mode (a node registered with endpoints and no agent): this
	// server runs the node steps itself, with the directory work the CSI
	// spec leaves to the CO, through the same code a node agent uses.
	direct := &nodestep.Executor{CSI: a.CSI}
	a.Server = server.New(server.Config{
		Store: a.Store, Log: a.Cluster, CSI: a.CSI, Node: direct, Agents: agents, Modules: modules, Ready: a.waitModules, Clock: a.clock, Logger: a.logger, Locks: locks,
	})
	a.Watcher = watcher.New(watcher.Config{
		MaxConcurrency:        cfg.Watcher.MaxConcurrency,
		ControllerConcurrency: cfg.Watcher.ControllerConcurrency,
		IdleTimeout:           d.IdleTimeout,
		BackoffBase:           d.BackoffBase,
		BackoffMax:            d.BackoffMax,
		MaxAttempts:           cfg.Watcher.MaxAttempts,
		AbandonAfter:          cfg.Watcher.AbandonAfter,
		StuckAfter:            d.StuckAfter,
		CSITimeout:            d.CSITimeout,
		GCInterval:            d.GCInterval,
		GCThreshold:           d.GCThreshold,
		VolumeRateLimit:       rate.Limit(cfg.Watcher.VolumeRateLimit),
		VolumeRateBurst:       cfg.Watcher.VolumeRateBurst,
		AutoForceDeregister:   cfg.EscapeHatch.AutoForceDeregister,
		AutoForceAfter:        d.EscapeAfter,
		MaxRetryAfter:         d.MaxRetryAfter,
		Clock:                 a.clock,
		Metrics:               a.Metrics,
	}, watcher.Deps{
		Feed:       a.Store,
		State:      a.Store.Reader(),
		Writer:     a.Cluster.ClaimWriter(),
		Node:       direct,
		Agents:     agents,
		Controller: a.CSI,
		Modules:    modules,
		Leadership: a.Cluster,
		Locks:      locks,
	}, a.logger)
	a.Server.SetReleaser(a.Watcher)
	if err := a.setupSchedulers(d); err != nil {
		a.CSI.Close()
		return nil, errors.Join(err, a.closeModules(context.Background()), a.Cluster.Shutdown(), a.lock.release())
	}
	apiCfg := api.Config{
		Addr: cfg.HTTP.Address, MaxBodyBytes: cfg.HTTP.MaxBodyBytes, Logger: a.logger.Named("http"),
		// Privileged actions are audited through the log with ACLs on or off.
		Audit: a.Cluster,
		// An operator snapshot save is spooled beside the raft snapshots
		// (the same size), not in memory.
		SpoolDir: cfg.DataDir,
	}
	if a.TLS != nil && cfg.TLS.HTTP {
		apiCfg.TLS, apiCfg.ForwardTLS = a.TLS.HTTPServerConfig(), a.TLS.ClientConfig()
	}
	cfg.apiLimits(&apiCfg, d)
	a.API = api.NewServer(apiCfg, a.Store, a.Server, a.Metrics.Handler())
	// Forwarding to the leader and the operator routes (a single node
	// always leads, so it only gains the operator routes).
	a.API.EnableCluster(a.Cluster)
	a.API.EnableModules(a)
	a.API.EnableSchedulers(a)
	a.setupACL()
	// A graceful leadership transfer stops this server's watcher (and
	// waits for its CSI calls) before leadership moves.
	a.Cluster.OnTransfer(func() { a.Watcher.SetEnabled(false) })
	return a, nil
}

// Run starts the agent and serves until ctx ends, then shuts it down.
func (a *Agent) Run(ctx context.Context) error {
	if err := a.Start(ctx); err != nil {
		return errors.Join(err, a.Shutdown())
	}
	<-ctx.Done()
	return a.Shutdown()
}

// Start opens the HTTP listener and starts following leadership; it
// returns once the API answers (HTTPAddr is valid).
func (a *Agent) Start(ctx context.Context) error {
	if err := a.API.Start(ctx); err != nil {
		return err
	}
	// Followers forward writes to the leader's API address, which the
	// members map learns from here (and from the join request).
	httpAddr := a.API.Addr()
	if sv := a.cfg.Server; sv != nil && sv.AdvertiseHTTP != "" {
		httpAddr = sv.AdvertiseHTTP
	}
	a.Cluster.SetHTTPAddr(httpAddr)
	ctx, a.stop = context.WithCancel(ctx)
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		a.followLeadership(ctx)
	}()
	a.startModules(ctx) // the first load, then the module sources
	if a.memory != nil {
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			a.memory.run(ctx, a.clock, a.logger)
		}()
	}
	if a.NodeRPC != nil {
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			if err := a.NodeRPC.Serve(); err != nil {
				a.logger.Error("node_rpc stopped", "error", err)
			}
		}()
		a.logger.Info("listening for node agents", "node_rpc", a.NodeRPC.Addr())
	}
	if sv := a.cfg.Server; sv != nil && sv.Enabled {
		// A follower re-sends its join to record its version and
		// features (cluster advertise.go), with the join's TLS and token.
		a.Cluster.SetJoinClient(a.joinClient())
	}
	if sv := a.cfg.Server; sv != nil && sv.Enabled && len(sv.Join) > 0 {
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			if err := a.Cluster.RetryJoin(ctx, a.joinAddrs(sv.Join), a.retryJoinMax, a.joinClient()); err != nil && ctx.Err() == nil {
				a.logger.Error("could not join the cluster", "join", sv.Join, "error", err)
			}
		}()
	}
	a.logger.Info("volhost agent started", "http", a.API.Addr(), "dev", a.cfg.Dev, "data_dir", a.cfg.DataDir)
	return nil
}

// HTTPAddr is the address the API listens on.
func (a *Agent) HTTPAddr() string { return a.API.Addr() }

// Shutdown stops the watcher, the API, the log and the CSI connections.
func (a *Agent) Shutdown() error {
	if a.stop != nil {
		a.stop()
	}
	if a.NodeRPC != nil {
		a.NodeRPC.Stop() // ends Serve and every agent's stream
	}
	a.wg.Wait()
	a.Watcher.SetEnabled(false)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := errors.Join(a.API.Shutdown(ctx), a.closeModules(ctx), a.Cluster.Shutdown(), a.CSI.Close())
	// Released last: the raft files are closed by now.
	return errors.Join(err, a.lock.release())
}

// followLeadership enables the watcher while this server leads and its
// modules are loaded (a volume is never judged by the native default while
// the module that serves it compiles). Only the leader releases claims; a
// step-down cancels every in-flight CSI call.
func (a *Agent) followLeadership(ctx context.Context) {
	ch := a.Cluster.LeaderCh()
	stopTracker, stopSchedulers := func() {}, func() {}
	defer func() { stopTracker(); stopSchedulers() }()
	ready, leading := (<-chan struct{})(a.modulesReady), false
	for {
		select {
		case <-ctx.Done():
			return
		case <-ready:
			ready = nil
			if leading {
				a.Watcher.SetEnabled(true)
				a.logger.Info("modules loaded: releasing claims")
			}
		case leader := <-ch:
			leading = leader
			a.Watcher.SetEnabled(leader && ready == nil)
			if leader && ready != nil {
				a.logger.Info("leadership changed; claims are released once the modules are loaded", "leader", leader)
			} else {
				a.logger.Info("leadership changed", "leader", leader)
			}
			stopTracker()
			stopSchedulers()
			stopTracker, stopSchedulers = func() {}, func() {}
			if leader {
				a.moduleEvents.flush()
				stopTracker = a.startTracker(ctx)
				stopSchedulers = a.startSchedulers(ctx)
			}
		}
	}
}

// startTracker runs the heartbeat tracker for this leadership; the
// returned function stops it and waits for it.
func (a *Agent) startTracker(ctx context.Context) func() {
	if a.Tracker == nil {
		return func() {}
	}
	tctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		a.runTracker(tctx)
	}()
	return func() {
		cancel()
		<-done
	}
}
