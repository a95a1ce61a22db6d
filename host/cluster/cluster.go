// Package cluster owns replication and leadership: every write to the
// state store goes through hashicorp/raft, even on a single node, so the
// store is always a deterministic function of the log.
//
// In dev mode the log, stable store, snapshots and transport are in memory;
// with a data directory the log and stable store are raft-boltdb, snapshots
// are files and the transport is TCP, so a restart rebuilds the state from
// the last snapshot plus the log and loses nothing.
//
// Apply validates a request against the current state before writing it to
// the log, so a refusal is an error to the caller and never a committed
// entry (hashicorp/nomad#27324).
//
// With Server set the node is one voter of a multi-server cluster: servers
// find each other through Join (the HTTP API forwards a join to the
// leader, which adds the joiner as a voter), BootstrapExpect lets one seed
// server wait for N-1 joiners and bootstrap all N at once, the cluster ID
// and the members' HTTP addresses live in the replicated state (meta.go),
// and a new leader of a multi-voter cluster reports its step-up only after
// StepUpDelay, by which time a deposed leader has stepped down and
// cancelled its CSI calls (RATIONALE.md "Cluster").
package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/jonboulle/clockwork"

	"github.com/volhost/volhost/host/state"
	"github.com/volhost/volhost/host/structs"
)

// Defaults.
const (
	DefaultApplyTimeout = 30 * time.Second
	DefaultBindAddr     = "127.0.0.1:0"
	DefaultNodeID       = "volhost-1"
	snapshotsRetained   = 2
)

// Config configures a Cluster.
type Config struct {
	// Dev keeps the log, stable store and snapshots in memory with an
	// in-memory transport; nothing survives the process.
	Dev bool
	// DataDir persists the log and stable store (raft-boltdb) and snapshots
	// (files) under DataDir/raft, with a TCP transport.
	DataDir string
	// NodeID is the raft server ID (default DefaultNodeID). Keep it stable
	// across restarts of one data directory.
	NodeID string
	// BindAddr is the TCP transport address with DataDir (default
	// DefaultBindAddr).
	BindAddr string
	// AdvertiseAddr is the raft address other servers reach this one at,
	// needed when BindAddr is unspecified (0.0.0.0:4748).
	AdvertiseAddr string
	// Bootstrap bootstraps a single-node cluster when no state exists yet.
	// Dev always bootstraps.
	Bootstrap bool
	// Logger is the parent logger; the cluster logs as "cluster" and raft as
	// "raft".
	Logger hclog.Logger
	// ApplyTimeout bounds an Apply or Barrier when ctx has no earlier
	// deadline (default DefaultApplyTimeout).
	ApplyTimeout time.Duration
	// SnapshotThreshold and SnapshotInterval override raft's automatic
	// snapshot policy (zero keeps raft's defaults).
	SnapshotThreshold uint64
	SnapshotInterval  time.Duration
	// FreshSnapshotEntries is the lag, in entries, of the newest snapshot
	// behind the applied state at which the leader, about to send it to a
	// follower, takes a fresh one first (snapshot_fresh.go; default the
	// snapshot threshold, which tests lift to keep the schedule quiet).
	FreshSnapshotEntries uint64
	// TrailingLogs is how many log entries a snapshot leaves behind for
	// slow followers (zero keeps raft's 10240); a follower further behind
	// catches up from the snapshot.
	TrailingLogs uint64
	// Clock stamps log entries (the time the FSM applies them with).
	Clock clockwork.Clock

	// Server makes this node a voter of a multi-server cluster. It never
	// bootstraps alone unless BootstrapExpect is 1: it waits to be joined
	// (Join on the leader) or, with BootstrapExpect N > 1, collects N-1
	// join requests and bootstraps all N as voters.
	Server          bool
	BootstrapExpect int
	// HTTPAddr is this server's API address, recorded in the members map
	// so followers can forward writes here while it leads (SetHTTPAddr
	// sets it once the listener is open).
	HTTPAddr string
	// Transport replaces the transport New would create (tests connect
	// in-memory transports to partition and heal servers). It is closed on
	// Shutdown.
	Transport raft.Transport
	// Raft timings for Server mode (zero: raft's defaults of 1s, 1s and
	// 500ms). A single node keeps its own short timings.
	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	// StepUpDelay is how long a new leader of a multi-voter cluster waits
	// after its barrier before reporting the step-up on LeaderCh (default
	// 2*LeaderLeaseTimeout + DefaultCancelMargin). See stepUpDelay.
	StepUpDelay time.Duration
	// OnHalt replaces the FSM's panic at a log entry this binary does not
	// understand (halt.go); the FSM stops applying either way. Tests set
	// it.
	OnHalt func(error)
	// AdvertiseInterval is how often a follower checks that its member
	// record carries its version and features and, if not, asks the
	// leader to record them (advertise.go; default 2s).
	AdvertiseInterval time.Duration
	// Commits is told about every group commit of claim checkpoints
	// (batch.go); nil: nobody.
	Commits CommitObserver

	// olderThanGates makes this server advertise no build and no
	// features, as a release before the feature gates does (tests of the
	// gates; its FSM still understands everything).
	olderThanGates bool
	// lacking makes this server advertise every feature but these, as
	// the release before them does (tests of one gate among enabled
	// ones; its FSM still understands everything).
	lacking []Feature
}

// DefaultCancelMargin is the time a deposed leader gets, after its lease
// expired, to cancel its in-flight CSI calls before the new leader may
// start its own (part of the default StepUpDelay).
const DefaultCancelMargin = time.Second

// Cluster is a raft node applying commands to a state store.
type Cluster struct {
	cfg    Config
	logger hclog.Logger
	store  *state.Store
	raft   *raft.Raft

	// aclWrites holds ACL writes (read side, Apply) off while an operator
	// restore installs the ACL state it read at the end of its upload
	// (write side, RestoreSnapshot): one committed between that read and
	// the install would be undone by it, a deleted token revived.
	aclWrites sync.RWMutex

	// snapGate orders the snapshots this server asks raft for
	// (snapshot_gate.go).
	snapGate *snapshotGate
	// snaps is the snapshot store raft was given (snapshot_fresh.go).
	snaps *freshSnapshots
	// stopSnapshotMin is snapshotOnStopMin (tests lower it).
	stopSnapshotMin uint64

	closers []io.Closer   // transport and bolt store, closed after raft
	storage *storageFault // the raft stores' last failed write (nil: in memory)

	notifyCh chan bool
	leaderCh chan bool
	stopCh   chan struct{}
	wg       sync.WaitGroup

	mu         sync.Mutex
	leader     bool
	changeCh   chan struct{} // closed and replaced on every leadership change
	httpAddr   string
	pending    map[string]JoinRequest // bootstrap-expect: joiners seen before bootstrap
	booted     bool                   // bootstrap-expect: BootstrapCluster was called
	onTransfer func()
	readyTerm  uint64 // term of the reported step-up (0: none)
	// barrierTerm is the term whose step-up barrier was applied
	// (ReadyForReads).
	barrierTerm uint64
	lease       time.Duration // raft's LeaderLeaseTimeout
	// The last successful leadership verification (ConfirmLeader).
	verifiedAt time.Time
	// verifyClock times a leadership verification (time.Now; tests make
	// one look slow).
	verifyClock  func() time.Time
	verifiedTerm uint64
	rereportCh   chan struct{}
	probe        ProbeFunc // membership checks (join.go); nil: count voters only

	meta  *meta
	trans raft.Transport
	// reach is trans when it is a network transport (reach_transport.go).
	reach       *reachTransport
	reconcileCh chan struct{}
	checkpoints *checkpointBatcher // group commit of claim checkpoints (batch.go)
	fsm         *fsm
	logs        raft.LogStore // read by tests and the digest's index check
	configs     *configLog    // the log's newest configuration entry (config_log.go)
	// gateMu orders the enabling of features with joins (gate.go).
	gateMu sync.Mutex
	// joinClient posts join requests (RetryJoin, advertise.go).
	joinClient *http.Client

	shutdownOnce sync.Once
	shutdownErr  error
}

// New starts a raft node over store. With DataDir and existing state, raft
// restores the last snapshot into the store and replays the log after it
// once it leads again (wait with WaitForLeader and Barrier).
func New(cfg Config, store *state.Store) (*Cluster, error) {
	if store == nil {
		return nil, errors.New("cluster: nil state store")
	}
	if cfg.Dev == (cfg.DataDir != "") {
		return nil, errors.New("cluster: set exactly one of Dev and DataDir")
	}
	if cfg.NodeID == "" {
		cfg.NodeID = DefaultNodeID
	}
	if cfg.BindAddr == "" {
		cfg.BindAddr = DefaultBindAddr
	}
	if cfg.ApplyTimeout <= 0 {
		cfg.ApplyTimeout = DefaultApplyTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.Clock == nil {
		cfg.Clock = clockwork.NewRealClock()
	}
	c := &Cluster{
		verifyClock: time.Now,
		cfg:         cfg,
		logger:      cfg.Logger.Named("cluster"),
		store:       store,
		notifyCh:    make(chan bool, 8),
		leaderCh:    make(chan bool, 1),
		stopCh:      make(chan struct{}),
		changeCh:    make(chan struct{}),
		httpAddr:    cfg.HTTPAddr,
		pending:     map[string]JoinRequest{},
		meta:        newMeta(),

		reconcileCh:     make(chan struct{}, 1),
		rereportCh:      make(chan struct{}, 1),
		stopSnapshotMin: snapshotOnStopMin,
	}
	if cfg.BootstrapExpect < 0 {
		return nil, structs.Invalid("bootstrap_expect", "must not be negative, got %d", cfg.BootstrapExpect)
	}
	if cfg.BootstrapExpect > 0 && !cfg.Server {
		return nil, structs.Invalid("bootstrap_expect", "needs server mode")
	}

	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.NodeID)
	rc.Logger = cfg.Logger.Named("raft")
	rc.NotifyCh = c.notifyCh
	// One voter needs no failure detection: short timeouts make a (re)start
	// lead within a fraction of a second instead of seconds.
	rc.HeartbeatTimeout = 200 * time.Millisecond
	rc.ElectionTimeout = 200 * time.Millisecond
	rc.LeaderLeaseTimeout = 100 * time.Millisecond
	if cfg.Server {
		// Several voters: failure detection matters, keep raft's defaults
		// unless told otherwise.
		d := raft.DefaultConfig()
		rc.HeartbeatTimeout = orDuration(cfg.HeartbeatTimeout, d.HeartbeatTimeout)
		rc.ElectionTimeout = orDuration(cfg.ElectionTimeout, d.ElectionTimeout)
		rc.LeaderLeaseTimeout = orDuration(cfg.LeaderLeaseTimeout, d.LeaderLeaseTimeout)
	}
	c.lease = rc.LeaderLeaseTimeout
	if c.cfg.StepUpDelay <= 0 {
		c.cfg.StepUpDelay = 2*rc.LeaderLeaseTimeout + DefaultCancelMargin
	}
	if cfg.SnapshotThreshold > 0 {
		rc.SnapshotThreshold = cfg.SnapshotThreshold
	}
	if cfg.SnapshotInterval > 0 {
		rc.SnapshotInterval = cfg.SnapshotInterval
	}
	if cfg.TrailingLogs > 0 {
		rc.TrailingLogs = cfg.TrailingLogs
	}
	// Servers of a cluster take turns to snapshot (snapshot_schedule.go);
	// raft's own timer is left to a single node, which has no one to
	// starve.
	var schedule *snapshotSchedule
	if cfg.Server {
		schedule = &snapshotSchedule{period: rc.SnapshotInterval, threshold: rc.SnapshotThreshold, now: time.Now,
			turns: &snapshotTurns{period: rc.SnapshotInterval}}
		rc.SnapshotInterval = snapshotTimerOff
	}

	fence := func() {} // a data dir's snapshots are fenced (snapshot_fence.go)
	var late *lateListener
	var (
		logs   raft.LogStore
		stable raft.StableStore
		snaps  raft.SnapshotStore
		trans  raft.Transport
	)
	if cfg.Dev {
		mem := raft.NewInmemStore()
		logs, stable, snaps = mem, mem, raft.NewInmemSnapshotStore()
		if cfg.Transport != nil {
			trans = cfg.Transport
		} else {
			_, trans = raft.NewInmemTransport(raft.NewInmemAddr())
		}
		if cl, ok := trans.(io.Closer); ok {
			c.closers = append(c.closers, cl)
		}
	} else {
		dir := filepath.Join(cfg.DataDir, "raft")
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("cluster: data dir: %w", err)
		}
		// The log and snapshots hold volume secrets in clear and the
		// keyring that seals saved snapshots: private, even when the
		// directory existed before with wider permissions.
		if err := os.Chmod(dir, 0o700); err != nil {
			return nil, fmt.Errorf("cluster: data dir: %w", err)
		}
		bolt, err := openLogStore(filepath.Join(dir, "raft.db"))
		if err != nil {
			return nil, fmt.Errorf("cluster: open raft log %s: %w", dir, err)
		}
		c.closers = append(c.closers, bolt)
		fss, err := raft.NewFileSnapshotStoreWithLogger(dir, snapshotsRetained, rc.Logger)
		if err != nil {
			c.closeAll()
			return nil, fmt.Errorf("cluster: snapshot store: %w", err)
		}
		var t raft.Transport = cfg.Transport
		if t == nil {
			t, err = newTCPTransport(cfg.BindAddr, cfg.AdvertiseAddr, &raft.NetworkTransportConfig{MaxPool: 3, Timeout: 10 * time.Second, Logger: rc.Logger})
			if err != nil {
				c.closeAll()
				return nil, err
			}
		}
		// Its listener opens once raft runs (late_listen.go).
		if lt, ok := t.(*lateTransport); ok {
			late, t = lt.ln, lt.NetworkTransport
		}
		// Appends to a follower that is down wait for it instead of
		// building raft's backoff (reach_transport.go).
		if nt, ok := t.(*raft.NetworkTransport); ok {
			c.reach = newReachTransport(nt)
			t = c.reach
		}
		if cl, ok := t.(io.Closer); ok {
			c.closers = append([]io.Closer{cl}, c.closers...)
		}
		c.storage = &storageFault{dir: dir}
		// Raft reads what it just appended from memory (log_cache.go).
		logs = newLogCache(faultLog{bolt, c.storage}, logCacheEntries, logCacheBytes)
		stable, snaps, trans = faultStable{bolt, c.storage}, fss, t
		fence = func() {
			c.wg.Add(1)
			go c.runSnapshotFence(schedule, fss, dir)
		}
	}
	c.configs = newConfigLog(logs)
	logs = c.configs
	c.trans = trans
	c.logs = logs

	// Who bootstraps: a single node (dev, or -data-dir without -server)
	// bootstraps itself; a server only with bootstrap_expect 1. A server
	// with bootstrap_expect N > 1 bootstraps in Join once N-1 others asked;
	// any other server waits to be added by the leader.
	single := !cfg.Server && (cfg.Dev || cfg.Bootstrap)
	if single || (cfg.Server && cfg.BootstrapExpect == 1) {
		has, err := raft.HasExistingState(logs, stable, snaps)
		if err != nil {
			c.closeAll()
			return nil, fmt.Errorf("cluster: read raft state: %w", err)
		}
		if !has {
			conf := raft.Configuration{Servers: []raft.Server{{
				Suffrage: raft.Voter, ID: rc.LocalID, Address: trans.LocalAddr(),
			}}}
			if err := raft.BootstrapCluster(rc, logs, stable, snaps, trans, conf); err != nil {
				c.closeAll()
				return nil, fmt.Errorf("cluster: bootstrap: %w", err)
			}
		}
	}

	has, err := raft.HasExistingState(logs, stable, snaps)
	if err != nil {
		c.closeAll()
		return nil, fmt.Errorf("cluster: read raft state: %w", err)
	}
	// A restarted server is already part of its cluster: bootstrap_expect
	// applies only to a fresh one.
	c.booted = has

	c.fsm = &fsm{store: store, meta: c.meta, logger: c.logger, halt: cfg.OnHalt}
	c.snapGate = newSnapshotGate()
	fresh := &freshSnapshots{SnapshotStore: snaps, gap: cfg.FreshSnapshotEntries, gate: c.snapGate, logger: c.logger}
	if fresh.gap == 0 {
		fresh.gap = rc.SnapshotThreshold
	}
	if c.reach != nil {
		fresh.reach = c.reach
		c.reach.stale = fresh.stale
	}
	r, err := raft.NewRaft(rc, c.fsm, logs, stable, fresh, trans)
	if err != nil {
		c.closeAll()
		return nil, fmt.Errorf("cluster: start raft: %w", err)
	}
	c.raft = r
	fresh.raft.Store(r)
	c.snaps = fresh
	if late != nil {
		// NewRaft restored the snapshot: now the leader may connect.
		if err := late.open(); err != nil {
			return nil, errors.Join(err, c.Shutdown())
		}
	}
	c.wg.Add(3)
	go c.forwardLeadership()
	go c.advertise()
	if schedule != nil {
		c.wg.Add(1)
		go c.runSnapshotSchedule(*schedule)
	}
	fence()
	c.checkpoints = newCheckpointBatcher(c)
	go c.checkpoints.run(c.stopCh)
	return c, nil
}

// forwardLeadership drains raft's NotifyCh (raft blocks on it) into the
// latest-value LeaderCh and the leadership flag WaitForLeader watches.
func (c *Cluster) forwardLeadership() {
	defer c.wg.Done()
	for {
		select {
		case <-c.stopCh:
			return
		case <-c.reconcileCh:
			if c.IsLeader() {
				c.reconcileMeta()
			}
		case <-c.rereportCh:
			// A graceful transfer failed and stopped this server's
			// leader work first: report the step-up again if, by now,
			// this server still leads the term it led before.
			if c.IsLeader() {
				c.stepUp()
			}
		case v := <-c.notifyCh:
			if !v {
				c.report(false, 0)
				continue
			}
			if !c.stepUp() {
				return
			}
		}
	}
}

// stepUp reports leadership once it is safe to start leader work; it
// returns false when the cluster stops. It reports only once every entry
// of earlier terms is applied: after a restart or a leader change the store
// must hold the whole log before the watcher assesses it (as in Nomad's
// volumewatcher, the first pass after step-up reaps everything). A failed barrier is retried
// while this server leads the same term; leader work never starts on a
// store that may be behind (the failover fence).
func (c *Cluster) stepUp() bool {
	term := c.raft.CurrentTerm()
	for attempt := 1; ; attempt++ {
		stopped, err := c.waitOrStop(c.raft.Barrier(c.cfg.ApplyTimeout))
		if stopped {
			return false
		}
		if err == nil {
			c.mu.Lock()
			c.barrierTerm = term
			c.mu.Unlock()
			break
		}
		if !c.IsLeader() || c.raft.CurrentTerm() != term {
			// The false that raft queued comes next.
			c.logger.Warn("barrier after step-up failed; leadership lost meanwhile", "error", err)
			return true
		}
		c.logger.Warn("barrier after step-up failed; retrying before starting leader work", "error", err, "attempt", attempt)
		select {
		case <-c.stopCh:
			return false
		case <-time.After(min(time.Duration(attempt)*100*time.Millisecond, 2*time.Second)):
		}
	}
	c.reconcileMeta()
	if !c.waitStepUpDelay() {
		return false
	}
	if !c.IsLeader() || c.raft.CurrentTerm() != term {
		// Lost it again while waiting: the false that raft queued comes
		// next; never report a stale true.
		return true
	}
	c.report(true, term)
	return true
}

// report publishes a leadership value on LeaderCh and to WaitForLeader,
// with the term it holds for (0 on a step-down).
func (c *Cluster) report(v bool, term uint64) {
	c.logger.Info("leadership changed", "leader", v, "term", term)
	c.mu.Lock()
	c.leader = v
	c.readyTerm = term
	close(c.changeCh)
	c.changeCh = make(chan struct{})
	c.mu.Unlock()
	select { // keep only the newest value: never block raft
	case <-c.leaderCh:
	default:
	}
	c.leaderCh <- v
}

// ReadyForReads reports whether this server leads and has applied every
// entry committed before its term (its step-up barrier), so its store
// holds every acknowledged write. A new leader is elected with its
// committed tail not yet applied: a read it answered then missed a write
// acknowledged before the leader change or a restart (found by
// test/peers/e2e TestDiskFull). It does not wait for StepUpDelay, which
// is for CSI calls, not reads.
func (c *Cluster) ReadyForReads() bool {
	c.mu.Lock()
	bt := c.barrierTerm
	c.mu.Unlock()
	return bt != 0 && c.IsLeader() && bt == c.raft.CurrentTerm()
}

// ReadyTerm is the leadership term this server leads in with its step-up
// complete (barrier applied, StepUpDelay waited), or 0 while it does not
// lead, is still stepping up, or is handing leadership over. Leader work
// (the watcher's passes, the claim path) runs under this term and passes
// it to ConfirmLeader before every CSI call it makes.
func (c *Cluster) ReadyTerm() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.leader {
		return 0
	}
	return c.readyTerm
}

// ConfirmLeader returns nil only if this server still leads in term, as
// confirmed by a quorum of voters (raft's VerifyLeader) within the last
// lease; otherwise an error wrapping structs.ErrNoLeader. It is the fence
// before every CSI call of leader work: a leader that
// was paused (SIGSTOP, a VM freeze) longer than its lease and wakes up has
// by then been replaced, and its verification fails instead of its call
// going out. A verification is shared by the calls that start within
// confirmMaxAge of it, so a burst of releases costs one round trip, not
// one each. What remains is a pause between this check and the call
// leaving the process (RATIONALE.md "Safety").
func (c *Cluster) ConfirmLeader(ctx context.Context, term uint64) error {
	if term == 0 || c.ReadyTerm() != term || c.raft.CurrentTerm() != term {
		return fmt.Errorf("leadership of term %d: %w", term, structs.ErrNoLeader)
	}
	maxAge := c.confirmMaxAge()
	c.mu.Lock()
	fresh := c.verifiedTerm == term && time.Since(c.verifiedAt) < maxAge
	c.mu.Unlock()
	if fresh {
		return nil
	}
	var start time.Time
	for attempt := 1; ; attempt++ {
		start = c.verifyClock()
		if err := wait(ctx, c.raft.VerifyLeader()); err != nil {
			return fmt.Errorf("confirm leadership of term %d: %w: %w", term, structs.ErrNoLeader, err)
		}
		took := c.verifyClock().Sub(start)
		if took <= maxAge {
			break
		}
		// The answer is about the past: a pause (or a very slow quorum)
		// happened in between. Do not act on it; ask again, since on a
		// loaded machine one slow round trip is common and the next is
		// usually quick (a claim failed for a verification of 51 ms
		// against 50 ms in make test). Each attempt stands on its own, so
		// retrying never acts on a stale answer.
		if attempt == confirmAttempts || ctx.Err() != nil || c.raft.CurrentTerm() != term || c.ReadyTerm() != term {
			return fmt.Errorf("confirm leadership of term %d: verification took %s, longer than %s (%d attempts): %w",
				term, took.Round(time.Millisecond), maxAge, attempt, structs.ErrNoLeader)
		}
	}
	if c.raft.CurrentTerm() != term || c.ReadyTerm() != term {
		return fmt.Errorf("leadership of term %d lost while confirming: %w", term, structs.ErrNoLeader)
	}
	c.mu.Lock()
	if start.After(c.verifiedAt) || c.verifiedTerm != term {
		c.verifiedAt, c.verifiedTerm = start, term
	}
	c.mu.Unlock()
	return nil
}

// StillConfirmed is ConfirmLeader's second look, without a round trip,
// right before a call it let through is sent (attach.Fence): nil while
// this server still leads in term and its last verification is younger
// than the leader lease. A server paused after its confirmation wakes
// with an older one: a new leader may have been elected meanwhile, so
// the call is not sent.
func (c *Cluster) StillConfirmed(term uint64) error {
	if term == 0 || c.ReadyTerm() != term || c.raft.CurrentTerm() != term {
		return fmt.Errorf("leadership of term %d: %w", term, structs.ErrNoLeader)
	}
	c.mu.Lock()
	ok, age := c.verifiedTerm == term, c.verifyClock().Sub(c.verifiedAt)
	c.mu.Unlock()
	if !ok || age >= c.lease {
		return fmt.Errorf("leadership of term %d last confirmed %s ago, longer than the leader lease %s (was this server paused?): %w",
			term, age.Round(time.Millisecond), c.lease, structs.ErrNoLeader)
	}
	return nil
}

// confirmAttempts bounds the verifications ConfirmLeader asks for when
// each answers too late to be relied on.
const confirmAttempts = 3

// confirmMaxAge bounds how old a leadership verification may be when a CSI
// call relies on it: half the leader lease, so a shared verification is
// always younger than the time a deposed leader keeps believing it leads.
func (c *Cluster) confirmMaxAge() time.Duration {
	return c.lease / 2
}

// waitStepUpDelay holds a new leader's step-up report in a cluster of
// several voters. Raft elects a new leader only after the followers lost
// contact with the old one, and the old leader steps down at the latest
// 2*LeaderLeaseTimeout after it lost its quorum (raft checks its lease once
// per LeaderLeaseTimeout), and its watcher then cancels every CSI call. So
// after StepUpDelay (default 2*LeaderLeaseTimeout + DefaultCancelMargin)
// no controller call of the old term is running (hashicorp/nomad#17996
// and #24130: never two ControllerUnpublish calls for one volume at once). A single
// voter has nobody to wait for. It returns false when the cluster stops.
func (c *Cluster) waitStepUpDelay() bool {
	if c.voters() <= 1 {
		return true
	}
	c.logger.Info("leading: waiting out the previous leader's lease before starting leader work", "delay", c.cfg.StepUpDelay)
	t := time.NewTimer(c.cfg.StepUpDelay)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-c.stopCh:
		return false
	}
}

// voters counts the voters in the latest raft configuration.
func (c *Cluster) voters() int {
	f := c.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return 0
	}
	n := 0
	for _, s := range f.Configuration().Servers {
		if s.Suffrage == raft.Voter {
			n++
		}
	}
	return n
}

func orDuration(v, d time.Duration) time.Duration {
	if v > 0 {
		return v
	}
	return d
}

// Store returns the state store this node applies to.
func (c *Cluster) Store() *state.Store { return c.store }

// LeaderCh delivers leadership changes (true: stepped up, false: stepped
// down). A true is sent once the log of earlier terms is applied to the
// store (a raft barrier), so the leader-only work that starts on it sees
// the whole state. It holds only the newest value, so a slow reader sees
// the current state rather than a backlog, and raft never blocks on it.
func (c *Cluster) LeaderCh() <-chan bool { return c.leaderCh }

// IsLeader reports whether this node is the raft leader now.
func (c *Cluster) IsLeader() bool { return c.raft.State() == raft.Leader }

// Leader returns the current leader's address and ID ("" when unknown).
func (c *Cluster) Leader() (addr, id string) {
	a, i := c.raft.LeaderWithID()
	return string(a), string(i)
}

// WaitForLeader blocks until this node leads, with the log of earlier terms
// applied (see LeaderCh), or ctx ends.
func (c *Cluster) WaitForLeader(ctx context.Context) error {
	for {
		c.mu.Lock()
		leader, ch := c.leader, c.changeCh
		c.mu.Unlock()
		if leader && c.IsLeader() {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("wait for leadership: %w", ctx.Err())
		}
	}
}

// timeout is the smaller of ApplyTimeout and the time left on ctx.
func (c *Cluster) timeout(ctx context.Context) time.Duration {
	t := c.cfg.ApplyTimeout
	if dl, ok := ctx.Deadline(); ok {
		if left := time.Until(dl); left < t {
			t = left
		}
	}
	return t
}

// raftErr maps raft's errors: anything meaning "this node cannot commit
// now" wraps structs.ErrNoLeader so callers branch on it (503).
func raftErr(op string, err error) error {
	if err == nil {
		return nil
	}
	switch {
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipLost),
		errors.Is(err, raft.ErrLeadershipTransferInProgress), errors.Is(err, raft.ErrRaftShutdown):
		return fmt.Errorf("%s: %w: %w", op, structs.ErrNoLeader, err)
	}
	return fmt.Errorf("%s: %w", op, err)
}

// applyErr tells a refused write from one whose outcome is unknown. Raft
// refuses before appending with ErrNotLeader (not the leader) and
// ErrEnqueueTimeout (never queued); a cancelled wait, ErrLeadershipLost
// (raft's own words: "the entry may still commit") and a shutdown while
// waiting leave the entry possibly committed: those wrap
// structs.ErrOutcomeUnknown, so no caller undoes what may be recorded
// (a claim path once rolled back a committed claim).
func applyErr(ctx context.Context, err error) error {
	switch {
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipTransferInProgress):
		return raftErr("apply", err)
	case errors.Is(err, raft.ErrEnqueueTimeout):
		return fmt.Errorf("apply: %w: %w", structs.ErrNoLeader, err)
	case ctx.Err() != nil, errors.Is(err, raft.ErrLeadershipLost), errors.Is(err, raft.ErrRaftShutdown):
		return fmt.Errorf("apply: %w (%w)", structs.ErrOutcomeUnknown, err)
	case diskRefused(err):
		return diskApplyErr(err)
	case errors.Is(err, syscall.EIO):
		// The leader's own log append failed midway: the entry may be on
		// its disk and commit once it leads again.
		return fmt.Errorf("apply: %w (this server's raft log write failed: %w)", structs.ErrOutcomeUnknown, err)
	}
	return fmt.Errorf("apply: %w", err)
}

// wait blocks until f resolves or ctx ends. The goroutine is bounded by the
// future: raft resolves every future, at the latest on Shutdown.
// waitOrStop waits for f or for Shutdown. raft answers no future that is
// still queued when it shuts down or stops leading before reading it, so
// the step-up's barrier could block the leadership forwarder, and
// Shutdown waiting for it, forever (TestTransferClearsReadyTerm hung for
// 20 minutes in make test). The goroutine reading such a future is left
// behind at shutdown, blocked on a future nothing will answer.
func (c *Cluster) waitOrStop(f raft.Future) (stopped bool, err error) {
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		return false, err
	case <-c.stopCh:
		return true, nil
	}
}

func wait(ctx context.Context, f raft.Future) error {
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Apply validates req against the current state, then commits it through
// raft and returns the entry's index and the FSM's response. A refusal,
// before the log or (after a race) at apply time, is the store's typed
// error (errors.Is(err, structs.ErrConflict) works); not being the leader
// fails fast with structs.ErrNoLeader. When ctx ends while waiting, the
// outcome is unknown: the entry may still commit.
func (c *Cluster) Apply(ctx context.Context, t structs.MessageType, req any) (index uint64, resp any, err error) {
	if err := ctx.Err(); err != nil {
		return 0, nil, err
	}
	if !c.IsLeader() {
		return 0, nil, c.noLeaderBecauseOfDisk(raftErr("apply", raft.ErrNotLeader))
	}
	if structs.IsACLWrite(t) {
		c.aclWrites.RLock()
		defer c.aclWrites.RUnlock()
	}
	asked := req
	req = c.olderRequestSettled(ctx, req)
	if err := c.checkGateSettled(ctx, t, req); err != nil {
		return 0, nil, err
	}
	snap := c.store.Snapshot()
	if req != asked && checksAsked(asked) {
		// The older form leaves out a mark the store checks at commit:
		// the request as asked is held to that rule before the log.
		if err := snap.Validate(t, asked); err != nil {
			return 0, nil, err
		}
	}
	if err := snap.Validate(t, req); err != nil {
		return 0, nil, err
	}
	data, err := encodeCommand(t, c.cfg.Clock.Now(), req)
	if err != nil {
		return 0, nil, err
	}
	f := c.raft.Apply(data, c.timeout(ctx))
	if err := wait(ctx, f); err != nil {
		err = applyErr(ctx, err)
		if (errors.Is(err, structs.ErrNoLeader) || errors.Is(err, structs.ErrOutcomeUnknown)) && !diskRefused(err) {
			// Leadership lost between the check and the append, or
			// while the entry waited: because of the disk, when its
			// last write failed.
			err = c.noLeaderBecauseOfDisk(err)
		}
		return 0, nil, err
	}
	res, ok := f.Response().(fsmResult)
	if !ok {
		return f.Index(), nil, fmt.Errorf("apply: unexpected FSM response %T", f.Response())
	}
	return f.Index(), res.resp, res.err
}

// Barrier blocks until every entry committed before it is applied to the
// store (after a restart: the whole log).
func (c *Cluster) Barrier(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return raftErr("barrier", wait(ctx, c.raft.Barrier(c.timeout(ctx))))
}

// Snapshot forces a raft snapshot now (tests use it to exercise restore).
func (c *Cluster) Snapshot() error {
	_, err := c.snapGate.take(c.raft, always)
	return raftErr("snapshot", err)
}

// LastIndex is the index of the last entry in this node's log.
func (c *Cluster) LastIndex() uint64 { return c.raft.LastIndex() }

// AppliedIndex is the index of the last entry applied to the store.
func (c *Cluster) AppliedIndex() uint64 { return c.raft.AppliedIndex() }

// Shutdown stops raft, the leadership forwarder, the transport and the log
// store. It is safe to call more than once.
func (c *Cluster) Shutdown() error {
	c.shutdownOnce.Do(func() {
		c.snapshotOnStop()
		if c.reach != nil {
			c.reach.stopWaiting()
		}
		err := c.raft.Shutdown().Error()
		close(c.stopCh)
		c.wg.Wait()
		if cerr := c.closeAll(); err == nil {
			err = cerr
		}
		if err != nil {
			c.shutdownErr = fmt.Errorf("cluster shutdown: %w", err)
		}
	})
	return c.shutdownErr
}

func (c *Cluster) closeAll() error {
	var errs []error
	for _, cl := range c.closers {
		if err := cl.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	c.closers = nil
	return errors.Join(errs...)
}
