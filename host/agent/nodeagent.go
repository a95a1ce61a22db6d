package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"

	"github.com/volhost/volhost/host/client"
	"github.com/volhost/volhost/host/nodeconn"
	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/host/tlsutil"
)

// NodeRPCConfig is the servers' side of the node agents' connection
// (README "Running node agents"): where servers listen for agents, and the heartbeat settings
// the leader applies. Off unless address is set.
type NodeRPCConfig struct {
	// Address is where node agents connect (default port 4749).
	Address string `hcl:"address,optional"`
	// HeartbeatInterval is what agents are told to heartbeat at (10s).
	HeartbeatInterval string `hcl:"heartbeat_interval,optional"`
	// HeartbeatTTL: a node is down after this long without a heartbeat (30s).
	HeartbeatTTL string `hcl:"heartbeat_ttl,optional"`
	// HeartbeatGrace is what a leader that just stepped up gives every node
	// before it may mark one down (default heartbeat_ttl).
	HeartbeatGrace string `hcl:"heartbeat_grace,optional"`
	// NodeGCThreshold: a node down for this long is gone (24h).
	NodeGCThreshold string `hcl:"node_gc_threshold,optional"`
}

// ClientConfig runs the agent as a node agent (`volhost agent -client`).
type ClientConfig struct {
	Enabled bool `hcl:"enabled,optional"`
	// Servers are the servers' node_rpc addresses.
	Servers []string `hcl:"servers,optional"`
	NodeID  string   `hcl:"node_id,optional"`
	// RootDir holds the staging and target directories, and the step
	// journal (root_dir/journal, host/client).
	RootDir string            `hcl:"root_dir,optional"`
	Meta    map[string]string `hcl:"meta,optional"`
	// Token is the ACL token secret the agent presents (node:write).
	Token string `hcl:"token,optional"`
	// ProbeInterval is how often a connected agent probes its plugins
	// again (10s): a plugin that stopped answering is reported within it,
	// and one that answers again is usable again within it.
	ProbeInterval string `hcl:"probe_interval,optional"`
	// ProbeTimeout bounds one plugin's probe (5s): past it the plugin is
	// reported as not answering.
	ProbeTimeout string          `hcl:"probe_timeout,optional"`
	Plugins      []*ClientPlugin `hcl:"plugin,block"`
}

// probeDurations parses the client's probe settings.
func (c *ClientConfig) probeDurations() (interval, timeout time.Duration, err error) {
	interval, timeout = client.DefaultProbeInterval, client.DefaultProbeTimeout
	errs := []error{
		optionalDuration("client.probe_interval", c.ProbeInterval, &interval),
		optionalDuration("client.probe_timeout", c.ProbeTimeout, &timeout),
	}
	if timeout > interval {
		errs = append(errs, fmt.Errorf("client.probe_timeout (%s) must not be longer than probe_interval (%s): a plugin is probed again only once its last probe ended", timeout, interval))
	}
	return interval, timeout, errors.Join(errs...)
}

// ClientPlugin is one node plugin's local socket.
type ClientPlugin struct {
	ID     string `hcl:"id,label"`
	Socket string `hcl:"socket"`
}

// nodeRPCDurations parses the node_rpc durations.
type nodeRPCDurations struct {
	Interval, TTL, Grace, GCThreshold time.Duration
}

func (c *NodeRPCConfig) durations() (nodeRPCDurations, error) {
	d := nodeRPCDurations{Interval: nodeconn.DefaultHeartbeatInterval, TTL: nodeconn.DefaultHeartbeatTTL,
		GCThreshold: nodeconn.DefaultNodeGCThreshold}
	errs := []error{
		optionalDuration("node_rpc.heartbeat_interval", c.HeartbeatInterval, &d.Interval),
		optionalDuration("node_rpc.heartbeat_ttl", c.HeartbeatTTL, &d.TTL),
		optionalDuration("node_rpc.heartbeat_grace", c.HeartbeatGrace, &d.Grace),
		optionalDuration("node_rpc.node_gc_threshold", c.NodeGCThreshold, &d.GCThreshold),
	}
	if d.Grace == 0 {
		d.Grace = d.TTL
	}
	if d.Interval >= d.TTL {
		errs = append(errs, fmt.Errorf("node_rpc.heartbeat_interval (%s) must be shorter than heartbeat_ttl (%s), or every node flaps down", d.Interval, d.TTL))
	}
	if _, port, err := net.SplitHostPort(c.Address); err != nil {
		errs = append(errs, fmt.Errorf("node_rpc.address: %q is not host:port", c.Address))
	} else if _, err := strconv.Atoi(port); err != nil {
		errs = append(errs, fmt.Errorf("node_rpc.address: %q has no numeric port", c.Address))
	}
	return d, errors.Join(errs...)
}

// storeNodes reads nodes for the heartbeat tracker.
type storeNodes struct{ a *Agent }

func (s storeNodes) Nodes() ([]*structs.Node, error) { return s.a.Store.Snapshot().Nodes(nil) }
func (s storeNodes) Node(id string) (*structs.Node, error) {
	return s.a.Store.Snapshot().NodeByID(nil, id)
}

// lazyServer lets the node connection reach the Server built after it.
type lazyServer struct{ a *Agent }

func (l lazyServer) RegisterAgentNode(ctx context.Context, n *structs.Node) (*structs.Node, error) {
	return l.a.Server.RegisterAgentNode(ctx, n)
}

// RegisteredNode is the node registered under id, nil when none is
// (nodeconn.NodeReader).
func (l lazyServer) RegisteredNode(id string) (*structs.Node, error) {
	return l.a.Store.Snapshot().NodeByID(nil, id)
}

func (l lazyServer) NodeLiveness(ctx context.Context, r *structs.NodeLivenessRequest) error {
	return l.a.Server.NodeLiveness(ctx, r)
}

// clusterLeader adapts the cluster to nodeconn.Leader.
type clusterLeader struct{ a *Agent }

func (c clusterLeader) IsLeader() bool           { return c.a.Cluster.ReadyTerm() != 0 }
func (c clusterLeader) Leader() (string, string) { return c.a.Cluster.Leader() }

// setupNodeRPC builds the node connection and the heartbeat tracker when
// node_rpc.address is set.
func (a *Agent) setupNodeRPC() error {
	nr := a.cfg.NodeRPC
	if nr == nil || nr.Address == "" {
		return nil
	}
	d, err := nr.durations()
	if err != nil {
		return err
	}
	a.Tracker = nodeconn.NewTracker(nodeconn.TrackerConfig{TTL: d.TTL, GCThreshold: d.GCThreshold, Grace: d.Grace,
		Clock: a.clock, Logger: a.logger}, storeNodes{a}, lazyServer{a})
	cfg := nodeconn.Config{Registrar: lazyServer{a}, Leader: clusterLeader{a}, Tracker: a.Tracker,
		HeartbeatInterval: d.Interval, Logger: a.logger}
	aclOn := a.cfg.ACL != nil && a.cfg.ACL.Enabled
	tlsOn := a.TLS != nil && a.cfg.TLS.RPC
	if tlsOn {
		// Mutual TLS: an agent presents a client (or server) certificate
		// of the cluster CA and region.
		cfg.TLS = a.TLS.NodeRPCServerConfig()
	}
	if aclOn || tlsOn {
		cfg.Auth = lazyAuth{a} // a.ACL is built after the node connection
	}
	switch {
	case !aclOn && !tlsOn:
		a.logger.Warn("INSECURE: node_rpc without acl.enabled or tls.rpc: anyone who reaches " + nr.Address + " may connect as any node and receive its volumes' secrets")
	case !aclOn:
		a.logger.Warn("INSECURE: node_rpc without acl.enabled: a client certificate that names no node (volhost tls cert create -client without -node) may connect as any node")
	case !tlsOn:
		a.logger.Warn("INSECURE: node_rpc without tls.rpc: node tokens and volume secrets cross the network in clear")
	}
	a.NodeRPC = nodeconn.NewServer(cfg)
	return a.NodeRPC.Listen(nr.Address)
}

// lazyAuth reaches the ACL service built after the node connection.
type lazyAuth struct{ a *Agent }

// Authorize checks that an agent's stream may act as node nodeID.
// With mutual TLS, a certificate naming a node (volhost tls cert create
// -client -node) may act as that node only, so a stolen node certificate
// cannot speak for another node even with a broader token. With ACLs on,
// the token must grant node:write on the node (nodeconn.ACLAuth holds the
// rule), so a token handed to one node cannot drive another.
func (l lazyAuth) Authorize(ctx context.Context, token, nodeID string) error {
	if err := l.a.bindNodeCert(ctx, nodeID); err != nil {
		return err
	}
	if l.a.ACL == nil {
		return nil
	}
	return nodeconn.ACLAuth(l.a.ACL.Resolver).Authorize(ctx, token, nodeID)
}

// AccessorOf is the accessor recorded on the node the token registers
// ("" with ACLs off: no token to revoke).
func (l lazyAuth) AccessorOf(token string) (string, error) {
	if l.a.ACL == nil {
		return "", nil
	}
	return nodeconn.ACLAuth(l.a.ACL.Resolver).(nodeconn.AccessorOf).AccessorOf(token)
}

// MayOperate says whether the token may make an operator's decisions:
// every caller may with ACLs off, as on the API.
func (l lazyAuth) MayOperate(token string) (bool, error) {
	if l.a.ACL == nil {
		return true, nil
	}
	return nodeconn.ACLAuth(l.a.ACL.Resolver).(nodeconn.OperatorOf).MayOperate(token)
}

// Revoked fires when the token stops granting the node; a certificate's
// node does not change while its connection lives, and without ACLs there
// is no token to revoke (a nil channel never fires).
func (l lazyAuth) Revoked(ctx context.Context, token, nodeID string) <-chan error {
	if l.a.ACL == nil {
		return nil
	}
	return nodeconn.ACLAuth(l.a.ACL.Resolver).Revoked(ctx, token, nodeID)
}

// bindNodeCert refuses a stream whose TLS certificate names a node other
// than nodeID. A connection without TLS, or a certificate naming no node,
// passes: the token decides.
func (a *Agent) bindNodeCert(ctx context.Context, nodeID string) error {
	p, ok := peer.FromContext(ctx)
	if !ok || a.TLS == nil {
		return nil
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(ti.State.PeerCertificates) == 0 {
		return nil
	}
	node, err := tlsutil.NodeOf(ti.State.PeerCertificates[0], a.TLS.Region())
	if err != nil {
		return fmt.Errorf("%w: %w", err, structs.ErrPermissionDenied)
	}
	if node != "" && node != nodeID {
		return fmt.Errorf("the agent's certificate was issued to node %q, not %q: %w", node, nodeID, structs.ErrPermissionDenied)
	}
	return nil
}

func newLogger(cfg *Config) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: "volhost", Level: hclog.LevelFromString(cfg.LogLevel), JSONFormat: cfg.LogJSON})
}

// runTracker sweeps heartbeats while this server leads with its step-up
// complete: Enable takes the term every transition is written under.
func (a *Agent) runTracker(ctx context.Context) {
	if err := a.Cluster.WaitForLeader(ctx); err != nil {
		return
	}
	term := a.Cluster.ReadyTerm()
	if term == 0 {
		return
	}
	a.Tracker.Enable(term)
	defer a.Tracker.Disable()
	a.Tracker.Run(ctx)
}

// RunClient runs a node agent until ctx ends (`volhost agent -client`).
func RunClient(ctx context.Context, cfg *Config) error {
	cc := cfg.Client
	if cc == nil || !cc.Enabled {
		return errors.New("client.enabled is not set")
	}
	if err := validLogLevel(cfg.LogLevel); err != nil {
		return err
	}
	plugins := map[string]string{}
	for _, p := range cc.Plugins {
		if p.ID == "" || p.Socket == "" {
			return fmt.Errorf(`client.plugin %q: socket is required`, p.ID)
		}
		if _, dup := plugins[p.ID]; dup {
			return fmt.Errorf("client.plugin %q appears twice", p.ID)
		}
		plugins[p.ID] = p.Socket
	}
	probeInterval, probeTimeout, err := cc.probeDurations()
	if err != nil {
		return err
	}
	ccfg := client.Config{Servers: cc.Servers, NodeID: cc.NodeID, RootDir: cc.RootDir, Plugins: plugins,
		Meta: cc.Meta, Token: cc.Token, ProbeInterval: probeInterval, ProbeTimeout: probeTimeout, Logger: newLogger(cfg)}
	if t := cfg.TLS; t != nil && t.RPC {
		h, err := tlsutil.Load(tlsutil.Config{CAFile: t.CAFile, CertFile: t.CertFile, KeyFile: t.KeyFile, Region: cfg.Region})
		if err != nil {
			return err
		}
		// The servers would refuse every stream of a certificate issued to
		// another node; say so now rather than in a reconnect loop.
		if node, err := tlsutil.NodeOf(h.Certificate().Leaf, h.Region()); err != nil {
			return fmt.Errorf("tls.cert_file %s: %w", t.CertFile, err)
		} else if node != "" && node != cc.NodeID {
			return fmt.Errorf("tls.cert_file %s was issued to node %q, but client.node_id is %q", t.CertFile, node, cc.NodeID)
		}
		ccfg.TLS = h.ClientConfig()
	}
	ag, err := client.New(ccfg)
	if err != nil {
		return err
	}
	return ag.Run(ctx)
}

// mergeNodeAgent overlays o's node_rpc and client blocks onto c.
func mergeNodeAgent(c, o *Config) {
	if nr := o.NodeRPC; nr != nil {
		if c.NodeRPC == nil {
			c.NodeRPC = &NodeRPCConfig{}
		}
		setString(&c.NodeRPC.Address, nr.Address)
		setString(&c.NodeRPC.HeartbeatInterval, nr.HeartbeatInterval)
		setString(&c.NodeRPC.HeartbeatTTL, nr.HeartbeatTTL)
		setString(&c.NodeRPC.HeartbeatGrace, nr.HeartbeatGrace)
		setString(&c.NodeRPC.NodeGCThreshold, nr.NodeGCThreshold)
	}
	if cl := o.Client; cl != nil {
		if c.Client == nil {
			c.Client = &ClientConfig{}
		}
		c.Client.Enabled = c.Client.Enabled || cl.Enabled
		if len(cl.Servers) > 0 {
			c.Client.Servers = append([]string(nil), cl.Servers...)
		}
		setString(&c.Client.NodeID, cl.NodeID)
		setString(&c.Client.RootDir, cl.RootDir)
		setString(&c.Client.Token, cl.Token)
		setString(&c.Client.ProbeInterval, cl.ProbeInterval)
		setString(&c.Client.ProbeTimeout, cl.ProbeTimeout)
		if len(cl.Plugins) > 0 {
			c.Client.Plugins = append([]*ClientPlugin(nil), cl.Plugins...)
		}
		if cl.Meta != nil {
			c.Client.Meta = cl.Meta
		}
	}
}
