package csi

import (
	"context"
	"fmt"
	"sync"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/watcher/attach"
)

// Defaults for Config.
const (
	// DefaultCallTimeout matches the reference system's CSI request timeout.
	DefaultCallTimeout = 2 * time.Minute
	// DefaultDialTimeout bounds one connection attempt, so an endpoint that
	// black-holes connects does not eat a whole call timeout.
	DefaultDialTimeout = 5 * time.Second
)

// CallObserver counts CSI calls by method and gRPC code (the Prometheus
// counter "CSI calls by code").
type CallObserver interface {
	ObserveCall(method string, code codes.Code, d time.Duration)
}

// Config configures a Client. Zero values take the defaults.
type Config struct {
	// CallTimeout is the deadline put on every call; a sooner ctx deadline wins.
	CallTimeout time.Duration
	// DialTimeout is how long one connection attempt may take.
	DialTimeout time.Duration
	// Logger is the CSI subsystem's named logger, used as given
	// (default: discard). Calls log at debug when failed, trace when OK.
	Logger hclog.Logger
	// Metrics, when set, observes every call that reached gRPC.
	Metrics CallObserver
	// Caller, when set, is sent with every call as the gRPC metadata
	// CallerHeader: a driver's logs then say which volhost server sent
	// each call, which is how an operator (or the chaos test) checks that
	// no deposed or paused leader sent one.
	Caller string
}

// CallerHeader is the gRPC metadata key naming the volhost server that
// sent a call (Config.Caller).
const CallerHeader = "x-volhost-server"

// Client talks to CSI plugins. It dials "unix:///path" and "tcp://host:port"
// endpoints lazily, caches one grpc.ClientConn per endpoint and is safe for
// concurrent use.
type Client struct {
	cfg Config
	log hclog.Logger

	mu     sync.Mutex
	closed bool
	conns  map[string]*conn   // live connection per endpoint
	all    map[*conn]struct{} // live and retired, so Close reaches every one
}

// conn is a cached connection with a count of the calls using it, so a
// retired connection is closed only once no call needs it.
type conn struct {
	cc      *grpc.ClientConn
	refs    int
	retired bool
}

// New returns a Client. It dials nothing until the first call.
func New(cfg Config) *Client {
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = DefaultCallTimeout
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = DefaultDialTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	return &Client{
		cfg:   cfg,
		log:   cfg.Logger,
		conns: make(map[string]*conn),
		all:   make(map[*conn]struct{}),
	}
}

// Close closes every connection; calls in flight fail with Canceled and
// later calls with ErrClosed.
func (c *Client) Close() error {
	c.mu.Lock()
	c.closed = true
	all := c.all
	c.all, c.conns = map[*conn]struct{}{}, map[string]*conn{}
	c.mu.Unlock()
	for cn := range all {
		_ = cn.cc.Close() // only fails for an already closed conn
	}
	return nil
}

// acquire returns the endpoint's connection with a reference taken.
//
// The endpoint is parsed only to dial: a cached connection's endpoint
// parsed once already, and a parse per call was a URL parse (and its
// allocations) on each of a release's three calls
// (TestAcquireCachedAllocatesNothing).
func (c *Client) acquire(endpoint string) (*conn, error) {
	var stale *grpc.ClientConn
	defer func() {
		if stale != nil {
			_ = stale.Close() // after unlocking: Close waits for gRPC's own goroutines
		}
	}()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	cn := c.conns[endpoint]
	if cn != nil && cn.cc.GetState() == connectivity.TransientFailure {
		// The driver went away. gRPC would wait out its reconnect backoff
		// (up to 2 minutes) and fail every call meanwhile; a fresh
		// connection tries at once, so a restarted driver is used by the
		// very next call.
		stale = c.retireLocked(endpoint, cn)
		cn = nil
	}
	if cn == nil {
		target, err := grpcTarget(endpoint)
		if err != nil {
			return nil, err
		}
		opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
		if c.cfg.Caller != "" {
			caller := c.cfg.Caller
			opts = append(opts, grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any,
				cc *grpc.ClientConn, invoker grpc.UnaryInvoker, callOpts ...grpc.CallOption) error {
				return invoker(metadata.AppendToOutgoingContext(ctx, CallerHeader, caller), method, req, reply, cc, callOpts...)
			}))
		}
		cc, err := grpc.NewClient(target, append(opts,
			grpc.WithConnectParams(grpc.ConnectParams{
				Backoff:           backoff.DefaultConfig,
				MinConnectTimeout: c.cfg.DialTimeout,
			}),
		)...)
		if err != nil {
			return nil, structs.Invalid("endpoint", "%q: %v", endpoint, err)
		}
		cn = &conn{cc: cc}
		c.conns[endpoint] = cn
		c.all[cn] = struct{}{}
	}
	cn.refs++
	return cn, nil
}

// settle connects cc and waits while it is connecting, until it is ready,
// has failed (the call then fails at once, sending nothing) or ctx ends.
func settle(ctx context.Context, cc *grpc.ClientConn) {
	for {
		switch st := cc.GetState(); st {
		case connectivity.Ready, connectivity.TransientFailure, connectivity.Shutdown:
			return
		case connectivity.Idle:
			cc.Connect()
			fallthrough
		default:
			if !cc.WaitForStateChange(ctx, st) {
				return
			}
		}
	}
}

// retireLocked drops cn from the cache so no new call uses it. It returns
// the connection to close now when no call holds it; otherwise the last
// call's release closes it.
func (c *Client) retireLocked(endpoint string, cn *conn) *grpc.ClientConn {
	delete(c.conns, endpoint)
	cn.retired = true
	if cn.refs > 0 {
		return nil
	}
	delete(c.all, cn)
	return cn.cc
}

// release drops a call's reference. unavailable retires the connection
// first: gRPC reports a failed dial to the call before it updates the
// channel state acquire checks, and a restarted driver must be used by the
// very next call. A driver that itself answers Unavailable only costs one
// reconnect.
func (c *Client) release(endpoint string, cn *conn, unavailable bool) {
	c.mu.Lock()
	cn.refs--
	if unavailable && c.conns[endpoint] == cn {
		delete(c.conns, endpoint)
		cn.retired = true
	}
	_, tracked := c.all[cn]
	last := cn.retired && cn.refs == 0 && tracked
	if last {
		delete(c.all, cn)
	}
	c.mu.Unlock()
	if last {
		_ = cn.cc.Close()
	}
}

// fields are what a call logs: IDs only. CSI spec: secrets fields must never
// be logged, so requests are never logged whole.
type fields struct {
	volumeID, nodeID string
	// secrets the request carries: redacted from a failed call's message
	// (redactSecrets), never logged.
	secrets map[string]string
}

// invoke runs one CSI call on endpoint with the call deadline, and records
// its code and duration.
func (c *Client) invoke(ctx context.Context, endpoint, method string, f fields, call func(context.Context, *grpc.ClientConn) error) error {
	cn, err := c.acquire(endpoint)
	if err != nil {
		return fmt.Errorf("csi %s: %w", method, err)
	}
	// The leader's fence, checked again as late as the client can
	// (attach.Call says why): after the connection is up, since gRPC
	// dials lazily, inside the call, and a first call after a driver
	// restart would otherwise cross the fence before its connection.
	if attach.HasFence(ctx) {
		settle(ctx, cn.cc)
		if err := attach.Fence(ctx); err != nil {
			c.release(endpoint, cn, false)
			return err
		}
	}
	start := time.Now()
	if d, ok := ctx.Deadline(); !ok || d.After(start.Add(c.cfg.CallTimeout)) {
		// Only when the caller's deadline is later (or none): the
		// watcher's own CSI deadline is the same timeout, set just
		// before, and a context derived under a sooner deadline is a
		// cancel context and its registration with the parent for
		// nothing, three times per release.
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, start.Add(c.cfg.CallTimeout))
		defer cancel()
	}
	err = redactSecrets(call(ctx, cn.cc), f.secrets)
	d := time.Since(start)
	code := status.Code(err)
	c.release(endpoint, cn, code == codes.Unavailable)
	if c.cfg.Metrics != nil {
		c.cfg.Metrics.ObserveCall(method, code, d)
	}
	// The log lines' fields are built only when their level is on: every
	// release makes three calls.
	args := func() []any {
		args := []any{"method", method, "endpoint", endpoint, "code", code.String(), "duration", d}
		if f.volumeID != "" {
			args = append(args, "volume_id", f.volumeID)
		}
		if f.nodeID != "" {
			args = append(args, "node_id", f.nodeID)
		}
		return args
	}
	if err != nil {
		if c.log.IsDebug() {
			c.log.Debug("csi call failed", append(args(), "error", status.Convert(err).Message())...)
		}
		return &Error{Method: method, Endpoint: endpoint, err: err}
	}
	if c.log.IsTrace() {
		c.log.Trace("csi call", args()...)
	}
	return nil
}

// ProbeController probes a controller endpoint at plugin registration:
// GetPluginInfo, Probe (must be ready), GetPluginCapabilities (must include
// CONTROLLER_SERVICE) and ControllerGetCapabilities. The returned Plugin has
// ControllerEndpoint, Provider, Version and Capabilities filled; the caller
// sets its ID.
func (c *Client) ProbeController(ctx context.Context, endpoint string) (*structs.Plugin, error) {
	info, err := c.pluginInfo(ctx, endpoint)
	if err != nil {
		return nil, err
	}
	if err := c.probe(ctx, endpoint); err != nil {
		return nil, err
	}
	var pcaps *csipb.GetPluginCapabilitiesResponse
	err = c.invoke(ctx, endpoint, "GetPluginCapabilities", fields{}, func(ctx context.Context, cc *grpc.ClientConn) (err error) {
		pcaps, err = csipb.NewIdentityClient(cc).GetPluginCapabilities(ctx, &csipb.GetPluginCapabilitiesRequest{})
		return err
	})
	if err != nil {
		return nil, err
	}
	controller := false
	for _, pc := range pcaps.GetCapabilities() {
		if pc.GetService().GetType() == csipb.PluginCapability_Service_CONTROLLER_SERVICE {
			controller = true
		}
	}
	if !controller {
		return nil, fmt.Errorf("csi plugin %q at %s: %w", info.GetName(), endpoint, ErrNoControllerService)
	}
	var ccaps *csipb.ControllerGetCapabilitiesResponse
	err = c.invoke(ctx, endpoint, "ControllerGetCapabilities", fields{}, func(ctx context.Context, cc *grpc.ClientConn) (err error) {
		ccaps, err = csipb.NewControllerClient(cc).ControllerGetCapabilities(ctx, &csipb.ControllerGetCapabilitiesRequest{})
		return err
	})
	if err != nil {
		return nil, err
	}
	p := &structs.Plugin{
		ControllerEndpoint: endpoint,
		Provider:           info.GetName(),
		Version:            info.GetVendorVersion(),
	}
	for _, cp := range ccaps.GetCapabilities() {
		switch cp.GetRpc().GetType() {
		case csipb.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME:
			p.Capabilities.PublishUnpublish = true
		case csipb.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME:
			p.Capabilities.CreateDelete = true
		case csipb.ControllerServiceCapability_RPC_PUBLISH_READONLY:
			p.Capabilities.PublishReadonly = true
		}
	}
	return p, nil
}

// ProbeNode probes a node endpoint when it is registered on a node: Probe
// (must be ready), NodeGetInfo (must report a node ID) and
// NodeGetCapabilities, then GetPluginCapabilities. The returned NodePlugin
// has Endpoint, ExternalNodeID, StageUnstage, MaxVolumes and
// ControllerService filled; the caller sets PluginID.
func (c *Client) ProbeNode(ctx context.Context, endpoint string) (*structs.NodePlugin, error) {
	if err := c.probe(ctx, endpoint); err != nil {
		return nil, err
	}
	var info *csipb.NodeGetInfoResponse
	err := c.invoke(ctx, endpoint, "NodeGetInfo", fields{}, func(ctx context.Context, cc *grpc.ClientConn) (err error) {
		info, err = csipb.NewNodeClient(cc).NodeGetInfo(ctx, &csipb.NodeGetInfoRequest{})
		return err
	})
	if err != nil {
		return nil, err
	}
	if info.GetNodeId() == "" {
		return nil, fmt.Errorf("csi node plugin at %s: %w", endpoint, ErrNoNodeID)
	}
	var caps *csipb.NodeGetCapabilitiesResponse
	err = c.invoke(ctx, endpoint, "NodeGetCapabilities", fields{}, func(ctx context.Context, cc *grpc.ClientConn) (err error) {
		caps, err = csipb.NewNodeClient(cc).NodeGetCapabilities(ctx, &csipb.NodeGetCapabilitiesRequest{})
		return err
	})
	if err != nil {
		return nil, err
	}
	np := &structs.NodePlugin{
		Endpoint:       endpoint,
		ExternalNodeID: info.GetNodeId(),
		MaxVolumes:     info.GetMaxVolumesPerNode(),
	}
	for _, cp := range caps.GetCapabilities() {
		if cp.GetRpc().GetType() == csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME {
			np.StageUnstage = true
		}
	}
	// Whether the driver also has a controller service: registration warns
	// when its plugin was registered without a controller endpoint, which
	// would skip ControllerUnpublish silently. Only a warning
	// rides on it, so a driver that fails this REQUIRED identity call is
	// registered as before (and the warning is not given).
	var pcaps *csipb.GetPluginCapabilitiesResponse
	err = c.invoke(ctx, endpoint, "GetPluginCapabilities", fields{}, func(ctx context.Context, cc *grpc.ClientConn) (err error) {
		pcaps, err = csipb.NewIdentityClient(cc).GetPluginCapabilities(ctx, &csipb.GetPluginCapabilitiesRequest{})
		return err
	})
	if err == nil {
		for _, pc := range pcaps.GetCapabilities() {
			if pc.GetService().GetType() == csipb.PluginCapability_Service_CONTROLLER_SERVICE {
				np.ControllerService = true
			}
		}
	}
	return np, nil
}

func (c *Client) pluginInfo(ctx context.Context, endpoint string) (*csipb.GetPluginInfoResponse, error) {
	var info *csipb.GetPluginInfoResponse
	err := c.invoke(ctx, endpoint, "GetPluginInfo", fields{}, func(ctx context.Context, cc *grpc.ClientConn) (err error) {
		info, err = csipb.NewIdentityClient(cc).GetPluginInfo(ctx, &csipb.GetPluginInfoRequest{})
		return err
	})
	return info, err
}

// probe calls Probe. CSI spec: an absent ready field means ready.
func (c *Client) probe(ctx context.Context, endpoint string) error {
	var resp *csipb.ProbeResponse
	err := c.invoke(ctx, endpoint, "Probe", fields{}, func(ctx context.Context, cc *grpc.ClientConn) (err error) {
		resp, err = csipb.NewIdentityClient(cc).Probe(ctx, &csipb.ProbeRequest{})
		return err
	})
	if err != nil {
		return err
	}
	if r := resp.GetReady(); r != nil && !r.GetValue() {
		return fmt.Errorf("csi plugin at %s: %w", endpoint, ErrNotReady)
	}
	return nil
}

// ControllerPublishVolume attaches a volume to a node; the response carries
// the publish context later node calls need.
func (c *Client) ControllerPublishVolume(ctx context.Context, endpoint string, req *csipb.ControllerPublishVolumeRequest) (*csipb.ControllerPublishVolumeResponse, error) {
	var resp *csipb.ControllerPublishVolumeResponse
	err := c.invoke(ctx, endpoint, "ControllerPublishVolume", fields{req.GetVolumeId(), req.GetNodeId(), req.GetSecrets()}, func(ctx context.Context, cc *grpc.ClientConn) (err error) {
		resp, err = csipb.NewControllerClient(cc).ControllerPublishVolume(ctx, req)
		return err
	})
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// ControllerUnpublishVolume detaches a volume from a node.
func (c *Client) ControllerUnpublishVolume(ctx context.Context, endpoint string, req *csipb.ControllerUnpublishVolumeRequest) error {
	return c.invoke(ctx, endpoint, "ControllerUnpublishVolume", fields{req.GetVolumeId(), req.GetNodeId(), req.GetSecrets()}, func(ctx context.Context, cc *grpc.ClientConn) error {
		_, err := csipb.NewControllerClient(cc).ControllerUnpublishVolume(ctx, req)
		return err
	})
}

// NodeStageVolume stages a volume at the node's staging path.
func (c *Client) NodeStageVolume(ctx context.Context, endpoint string, req *csipb.NodeStageVolumeRequest) error {
	return c.invoke(ctx, endpoint, "NodeStageVolume", fields{volumeID: req.GetVolumeId(), secrets: req.GetSecrets()}, func(ctx context.Context, cc *grpc.ClientConn) error {
		_, err := csipb.NewNodeClient(cc).NodeStageVolume(ctx, req)
		return err
	})
}

// NodePublishVolume publishes a volume at a claim's target path.
func (c *Client) NodePublishVolume(ctx context.Context, endpoint string, req *csipb.NodePublishVolumeRequest) error {
	return c.invoke(ctx, endpoint, "NodePublishVolume", fields{volumeID: req.GetVolumeId(), secrets: req.GetSecrets()}, func(ctx context.Context, cc *grpc.ClientConn) error {
		_, err := csipb.NewNodeClient(cc).NodePublishVolume(ctx, req)
		return err
	})
}

// NodeUnpublishVolume removes a claim's target path.
func (c *Client) NodeUnpublishVolume(ctx context.Context, endpoint string, req *csipb.NodeUnpublishVolumeRequest) error {
	return c.invoke(ctx, endpoint, "NodeUnpublishVolume", fields{volumeID: req.GetVolumeId()}, func(ctx context.Context, cc *grpc.ClientConn) error {
		_, err := csipb.NewNodeClient(cc).NodeUnpublishVolume(ctx, req)
		return err
	})
}

// NodeUnstageVolume unstages a volume from the node's staging path.
func (c *Client) NodeUnstageVolume(ctx context.Context, endpoint string, req *csipb.NodeUnstageVolumeRequest) error {
	return c.invoke(ctx, endpoint, "NodeUnstageVolume", fields{volumeID: req.GetVolumeId()}, func(ctx context.Context, cc *grpc.ClientConn) error {
		_, err := csipb.NewNodeClient(cc).NodeUnstageVolume(ctx, req)
		return err
	})
}
