package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/raft"

	"github.com/volhost/volhost/host/structs"
)

// ErrJoinRefused marks a join the cluster refuses for good (another
// cluster's ID, another protocol version): retrying cannot help. It also
// wraps structs.ErrConflict, so the API answers 409.
var ErrJoinRefused = errors.New("join refused")

// JoinRequest is what a server sends to join a cluster (POST
// /v1/operator/raft/join on any server's API).
type JoinRequest struct {
	// ID is the joiner's raft server ID; RaftAddr its raft transport
	// address; HTTPAddr its API address (where writes are forwarded while
	// it leads).
	ID       string `json:"id"`
	RaftAddr string `json:"raft_addr"`
	HTTPAddr string `json:"http_addr"`
	// ClusterID is the cluster the joiner already belongs to ("" when it
	// is fresh). A different non-empty ID is refused.
	ClusterID string `json:"cluster_id"`
	// Version is the joiner's ProtocolVersion, 1: releases before the
	// feature gates refuse any other value, so a newer server stays
	// joinable by an older leader during a rolling upgrade.
	Version int `json:"version"`
	// Build and Features say what the joiner runs and understands
	// (gate.go). A joiner that lacks a feature the cluster enabled is
	// refused. Servers older than the gates send neither, and refuse a
	// request that has them: joinOnce then sends the older form.
	Build    string   `json:"build,omitempty"`
	Features []string `json:"features,omitempty"`
}

// legacyJoinRequest is the join request of releases before the feature
// gates: their API refuses unknown fields.
type legacyJoinRequest struct {
	ID        string `json:"id"`
	RaftAddr  string `json:"raft_addr"`
	HTTPAddr  string `json:"http_addr"`
	ClusterID string `json:"cluster_id"`
	Version   int    `json:"version"`
}

// JoinResponse answers a join.
type JoinResponse struct {
	ClusterID string `json:"cluster_id"`
	// Leader is the raft ID of the leader that added the joiner.
	Leader string `json:"leader"`
	// Pending: the seed server recorded the joiner but still waits for
	// bootstrap_expect servers; ask again.
	Pending bool `json:"pending"`
}

// Peer is one server of the raft configuration.
type Peer struct {
	ID       string `json:"id"`
	RaftAddr string `json:"raft_addr"`
	HTTPAddr string `json:"http_addr"`
	Leader   bool   `json:"leader"`
	Voter    bool   `json:"voter"`
	// Build and Features are what the server advertised (empty: a
	// version before the feature gates, or not recorded yet).
	Build    string   `json:"build,omitempty"`
	Features []string `json:"features,omitempty"`
}

// ID is the cluster ID ("" until the first leader created it).
func (c *Cluster) ID() string { return c.meta.clusterID() }

// NodeID is this server's raft ID.
func (c *Cluster) NodeID() string { return c.cfg.NodeID }

// RaftAddr is this server's raft transport address.
func (c *Cluster) RaftAddr() string { return string(c.trans.LocalAddr()) }

// Members lists the servers the replicated members map knows, by ID.
func (c *Cluster) Members() []Member { return c.meta.list() }

// Self is the join request this server sends to join a cluster.
func (c *Cluster) Self() JoinRequest {
	c.mu.Lock()
	addr := c.httpAddr
	c.mu.Unlock()
	return JoinRequest{
		ID: c.cfg.NodeID, RaftAddr: c.RaftAddr(), HTTPAddr: addr,
		ClusterID: c.ID(), Version: ProtocolVersion, Build: c.build(), Features: c.features(),
	}
}

// build and features are what this server advertises (Config.olderThanGates).
func (c *Cluster) build() string {
	if c.cfg.olderThanGates {
		return ""
	}
	return BuildVersion
}

func (c *Cluster) features() []string {
	if c.cfg.olderThanGates {
		return nil
	}
	return slices.DeleteFunc(Features(), func(f string) bool { return slices.Contains(c.cfg.lacking, Feature(f)) })
}

// selfMember is this server's member record.
func (c *Cluster) selfMember() Member {
	c.mu.Lock()
	addr := c.httpAddr
	c.mu.Unlock()
	return Member{ID: c.cfg.NodeID, RaftAddr: c.RaftAddr(), HTTPAddr: addr, Version: ProtocolVersion,
		Build: c.build(), Features: c.features()}
}

func joinMember(req JoinRequest) Member {
	return Member{ID: req.ID, RaftAddr: req.RaftAddr, HTTPAddr: req.HTTPAddr, Version: req.Version,
		Build: req.Build, Features: req.Features}
}

// SetHTTPAddr records this server's API address (known once the listener
// is open); while leading, the server writes it to the members map.
func (c *Cluster) SetHTTPAddr(addr string) {
	c.mu.Lock()
	c.httpAddr = addr
	c.mu.Unlock()
	select {
	case c.reconcileCh <- struct{}{}:
	default:
	}
}

// OnTransfer sets the hook a graceful leadership transfer calls before the
// transfer starts: the agent disables the watcher, which waits until every
// in-flight CSI call returned, so the old leader's watcher is stopped before
// the new leader can start its own. When the transfer fails, leader work
// restarts through LeaderCh like any step-up, never from here.
func (c *Cluster) OnTransfer(fn func()) {
	c.mu.Lock()
	c.onTransfer = fn
	c.mu.Unlock()
}

// KnownLeader reports whether this server knows a leader now.
func (c *Cluster) KnownLeader() bool {
	_, id := c.raft.LeaderWithID()
	return id != ""
}

// LastContact is how stale this server's state may be: zero on the
// leader, otherwise the time since it last heard from a leader (-1 when it
// never has).
func (c *Cluster) LastContact() time.Duration {
	if c.IsLeader() {
		return 0
	}
	last := c.raft.LastContact()
	if last.IsZero() {
		return -1
	}
	return time.Since(last)
}

// LeaderHTTPAddr is the leader's API address from the members map. No
// known leader, or a leader whose address is not replicated yet, is
// structs.ErrNoLeader: the caller answers 503 at once instead of waiting.
func (c *Cluster) LeaderHTTPAddr() (string, error) {
	_, id := c.raft.LeaderWithID()
	if id == "" {
		return "", c.noLeaderBecauseOfDisk(structs.ErrNoLeader)
	}
	m, ok := c.meta.member(string(id))
	if !ok || m.HTTPAddr == "" {
		return "", fmt.Errorf("%w: leader %s has no known HTTP address yet", structs.ErrNoLeader, id)
	}
	return m.HTTPAddr, nil
}

// applyMeta commits a cluster-owned command (leader only).
func (c *Cluster) applyMeta(ctx context.Context, t byte, cmd metaCommand) error {
	if !c.IsLeader() {
		return raftErr("apply", raft.ErrNotLeader)
	}
	if g, ok := gateOfMeta(t); ok {
		if err := c.needFeature(g, fmt.Sprintf("cluster command %d", t)); err != nil {
			return err
		}
	}
	data, err := encodeMeta(t, cmd)
	if err != nil {
		return err
	}
	f := c.raft.Apply(data, c.timeout(ctx))
	if err := wait(ctx, f); err != nil {
		return raftErr("apply", err)
	}
	if res, ok := f.Response().(fsmResult); ok && res.err != nil {
		return res.err
	}
	return nil
}

// reconcileMeta runs on the leader: it creates the cluster ID on the first
// step-up after bootstrap, records its own HTTP address and those of the
// servers a bootstrap_expect seed collected. Failures are logged: the next
// step-up or SetHTTPAddr tries again.
func (c *Cluster) reconcileMeta() {
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.ApplyTimeout)
	defer cancel()
	if c.meta.clusterID() == "" {
		id := uuid.New().String()
		if err := c.applyMeta(ctx, clusterInitType, metaCommand{ClusterID: id}); err != nil {
			c.logger.Warn("creating the cluster ID failed", "error", err)
			return
		}
		c.logger.Info("cluster created", "cluster_id", c.meta.clusterID())
	}
	self := c.selfMember()
	c.mu.Lock()
	pending := make([]JoinRequest, 0, len(c.pending))
	for _, p := range c.pending {
		pending = append(pending, p)
	}
	c.mu.Unlock()
	want := []Member{self}
	for _, p := range pending {
		want = append(want, joinMember(p))
	}
	for i, m := range want {
		// This server's own record is written even without an HTTP
		// address yet: it carries the features the gates count.
		if m.HTTPAddr == "" && i > 0 {
			continue
		}
		if cur, ok := c.meta.member(m.ID); ok && sameMember(cur, m) {
			continue
		}
		if err := c.applyMeta(ctx, memberUpsertType, metaCommand{Member: &m}); err != nil {
			c.logger.Warn("recording a member failed", "member", m.ID, "error", err)
			return
		}
	}
	c.mu.Lock()
	clear(c.pending)
	c.mu.Unlock()
	if err := c.reconcileFeatures(ctx); err != nil {
		c.logger.Warn("enabling features failed", "error", err)
	}
	c.ensureKeyring(ctx)
}

// validateJoin checks a join request's fields and compatibility.
func (c *Cluster) validateJoin(req JoinRequest) error {
	switch {
	case req.ID == "":
		return structs.Invalid("id", "must not be empty")
	case req.RaftAddr == "":
		return structs.Invalid("raft_addr", "must not be empty")
	}
	// What a joiner must understand is the features this cluster enabled
	// (checkJoinFeatures, under gateMu in Join), not a protocol number.
	if id := c.ID(); id != "" && req.ClusterID != "" && req.ClusterID != id {
		return fmt.Errorf("%w: %w: server %s belongs to cluster %s, this is cluster %s (wipe its data dir to join this one)",
			ErrJoinRefused, structs.ErrConflict, req.ID, req.ClusterID, id)
	}
	return nil
}

// Join adds a server to the cluster. On the leader it adds the joiner as a
// voter (idempotent: asking again is harmless) and records its HTTP
// address. On a fresh bootstrap_expect N seed it records the joiner and,
// once N-1 distinct servers asked, bootstraps all N as voters; until then
// the answer is Pending. Anywhere else it is structs.ErrNoLeader (the API
// forwards joins to the leader before they get here).
func (c *Cluster) Join(ctx context.Context, req JoinRequest) (JoinResponse, error) {
	if err := c.validateJoin(req); err != nil {
		return JoinResponse{}, err
	}
	if req.ID == c.cfg.NodeID && req.RaftAddr == c.RaftAddr() {
		// This server asking itself: a restarted server's retry-join that
		// reached the cluster through itself, now the leader or a member.
		if c.IsLeader() {
			return JoinResponse{ClusterID: c.ID(), Leader: c.cfg.NodeID}, nil
		}
		return JoinResponse{}, fmt.Errorf("join: %w (this server is not the leader)", structs.ErrNoLeader)
	}
	if req.ID == c.cfg.NodeID {
		return JoinResponse{}, fmt.Errorf("%w: %w: server ID %s is this server's own ID (give every server its own -node-id)",
			ErrJoinRefused, structs.ErrConflict, req.ID)
	}
	if !c.IsLeader() {
		return c.joinSeed(req)
	}
	resp, err := c.joinLeader(ctx, req)
	if err != nil {
		return resp, err
	}
	if err := c.reconcileFeatures(ctx); err != nil {
		c.logger.Warn("enabling features after a join failed", "error", err)
	}
	return resp, nil
}

// joinLeader adds the joiner and records it, under gateMu: no feature is
// enabled between its check and its addition.
func (c *Cluster) joinLeader(ctx context.Context, req JoinRequest) (JoinResponse, error) {
	c.gateMu.Lock()
	defer c.gateMu.Unlock()
	if err := c.checkJoinFeatures(req); err != nil {
		return JoinResponse{}, err
	}
	cf := c.raft.GetConfiguration()
	if err := cf.Error(); err != nil {
		return JoinResponse{}, raftErr("join", err)
	}
	for _, s := range cf.Configuration().Servers {
		if string(s.Address) == req.RaftAddr && string(s.ID) != req.ID {
			return JoinResponse{}, fmt.Errorf("%w: raft address %s already belongs to server %s (remove it first: volhost operator raft remove-peer %s)",
				structs.ErrConflict, req.RaftAddr, s.ID, s.ID)
		}
	}
	f := c.raft.AddVoter(raft.ServerID(req.ID), raft.ServerAddress(req.RaftAddr), 0, c.timeout(ctx))
	if err := wait(ctx, f); err != nil {
		return JoinResponse{}, raftErr("join: add voter", err)
	}
	if req.HTTPAddr != "" || len(req.Features) > 0 {
		m := joinMember(req)
		if cur, ok := c.meta.member(req.ID); !ok || !sameMember(cur, m) {
			if err := c.applyMeta(ctx, memberUpsertType, metaCommand{Member: &m}); err != nil {
				return JoinResponse{}, err
			}
		}
	}
	c.logger.Info("server joined", "id", req.ID, "raft_addr", req.RaftAddr, "http_addr", req.HTTPAddr)
	return JoinResponse{ClusterID: c.ID(), Leader: c.cfg.NodeID}, nil
}

// joinSeed is Join on a server that does not lead: only a fresh
// bootstrap_expect seed accepts joins, by collecting them.
func (c *Cluster) joinSeed(req JoinRequest) (JoinResponse, error) {
	c.mu.Lock()
	if c.cfg.BootstrapExpect > 1 && c.booted && !c.KnownLeader() {
		// Bootstrapped, first election still running: ask again soon.
		c.mu.Unlock()
		return JoinResponse{Pending: true}, nil
	}
	if c.cfg.BootstrapExpect <= 1 || c.booted {
		c.mu.Unlock()
		return JoinResponse{}, fmt.Errorf("join: %w (this server is not the leader)", structs.ErrNoLeader)
	}
	c.pending[req.ID] = req
	if len(c.pending)+1 < c.cfg.BootstrapExpect {
		n := len(c.pending) + 1
		c.mu.Unlock()
		c.logger.Info("waiting for servers to bootstrap", "have", n, "expect", c.cfg.BootstrapExpect)
		return JoinResponse{Pending: true}, nil
	}
	conf := raft.Configuration{Servers: []raft.Server{{
		Suffrage: raft.Voter, ID: raft.ServerID(c.cfg.NodeID), Address: c.trans.LocalAddr(),
	}}}
	for _, p := range c.pending {
		conf.Servers = append(conf.Servers, raft.Server{
			Suffrage: raft.Voter, ID: raft.ServerID(p.ID), Address: raft.ServerAddress(p.RaftAddr),
		})
	}
	c.booted = true
	c.mu.Unlock()
	if err := c.raft.BootstrapCluster(conf).Error(); err != nil {
		c.mu.Lock()
		c.booted = false
		c.mu.Unlock()
		return JoinResponse{}, fmt.Errorf("bootstrap with %d servers: %w", len(conf.Servers), err)
	}
	c.logger.Info("bootstrapped the cluster", "servers", len(conf.Servers))
	// The joiners are voters now; the leader records their addresses
	// (reconcileMeta) and their next join attempt finds it.
	return JoinResponse{Pending: true}, nil
}

// Peers lists the raft configuration with each server's HTTP address.
func (c *Cluster) Peers() ([]Peer, error) {
	f := c.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, raftErr("peers", err)
	}
	_, leader := c.raft.LeaderWithID()
	var out []Peer
	for _, s := range f.Configuration().Servers {
		m, _ := c.meta.member(string(s.ID))
		out = append(out, Peer{
			ID: string(s.ID), RaftAddr: string(s.Address), HTTPAddr: m.HTTPAddr,
			Leader: s.ID == leader, Voter: s.Suffrage == raft.Voter,
			Build: m.Build, Features: m.Features,
		})
	}
	return out, nil
}

// RemovePeer removes a server from the raft configuration and the members
// map (leader only). An unknown ID is structs.ErrNotFound.
func (c *Cluster) RemovePeer(ctx context.Context, id string) error {
	if id == "" {
		return structs.Invalid("id", "must not be empty")
	}
	if !c.IsLeader() {
		return raftErr("remove peer", raft.ErrNotLeader)
	}
	peers, err := c.Peers()
	if err != nil {
		return err
	}
	found := false
	for _, p := range peers {
		found = found || p.ID == id
	}
	if !found {
		return structs.NotFound("raft peer", id)
	}
	if err := wait(ctx, c.raft.RemoveServer(raft.ServerID(id), 0, c.timeout(ctx))); err != nil {
		return raftErr("remove peer", err)
	}
	if id == c.cfg.NodeID {
		// This leader removed itself and steps down; the next leader
		// cleans the members map on its reconcile if needed.
		return nil
	}
	if err := c.applyMeta(ctx, memberRemoveType, metaCommand{RemoveID: id}); err != nil {
		return err
	}
	// The removed server may have been the last one lacking a feature.
	if err := c.reconcileFeatures(ctx); err != nil {
		c.logger.Warn("enabling features after a removal failed", "error", err)
	}
	return nil
}

// TransferLeadership hands leadership to the server id (any voter when
// empty). The OnTransfer hook stops this server's leader work first, so the
// new leader's watcher never overlaps the old one's.
func (c *Cluster) TransferLeadership(ctx context.Context, id string) error {
	if !c.IsLeader() {
		return raftErr("transfer leadership", raft.ErrNotLeader)
	}
	var target *Peer
	if id != "" {
		peers, err := c.Peers()
		if err != nil {
			return err
		}
		for i := range peers {
			if peers[i].ID == id {
				target = &peers[i]
			}
		}
		switch {
		case target == nil:
			return structs.NotFound("raft peer", id)
		case target.ID == c.cfg.NodeID:
			return structs.Invalid("id", "%s already leads", id)
		case !target.Voter:
			return structs.Invalid("id", "%s is not a voter", id)
		}
	}
	// No new leader work from here on: the claim path asks ReadyTerm, and
	// the hook stops the watcher (and waits for its CSI calls).
	c.mu.Lock()
	hook := c.onTransfer
	c.readyTerm = 0
	c.mu.Unlock()
	if hook != nil {
		hook()
	}
	var f raft.Future
	if target != nil {
		f = c.raft.LeadershipTransferToServer(raft.ServerID(target.ID), raft.ServerAddress(target.RaftAddr))
	} else {
		f = c.raft.LeadershipTransfer()
	}
	err := wait(ctx, f)
	if err != nil {
		// Leader work restarts only through the leadership forwarder, the
		// one goroutine that also reports step-downs: re-enabling here
		// directly could race a concurrent step-down and start the
		// watcher on a follower. The forwarder
		// re-reports the step-up if this server still leads by then.
		select {
		case c.rereportCh <- struct{}{}:
		default:
		}
		return raftErr("transfer leadership", err)
	}
	c.logger.Info("leadership transferred", "to", id)
	return nil
}
