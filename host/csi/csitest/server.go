// Package csitest is a scripted CSI plugin for tests: a real gRPC server
// implementing the CSI Identity, Controller and Node services on a unix
// socket, whose outcomes are queued per method, which records every request
// in order with the concurrency it saw, and which can be stopped and
// restarted on the same socket to simulate a driver process going away.
//
// It models what a driver and its machines hold, in an Oracle (oracle.go):
// ControllerPublish attaches a volume to a node and ControllerUnpublish
// detaches it, NodeStage stages it at a staging path of a machine and
// NodePublish publishes it at a target there; every call is checked against
// the CSI spec's preconditions on that state. Required fields are checked
// like real drivers do (an empty node ID is rejected, as the GCE PD driver
// does). Nothing is mounted. A scripted outcome can also let the call run
// and lose its answer (Result.Ran).
package csitest

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/jonboulle/clockwork"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// CSI method names, as the host's client reports them.
const (
	GetPluginInfo             = "GetPluginInfo"
	GetPluginCapabilities     = "GetPluginCapabilities"
	Probe                     = "Probe"
	ControllerGetCapabilities = "ControllerGetCapabilities"
	ControllerPublish         = "ControllerPublishVolume"
	ControllerUnpublish       = "ControllerUnpublishVolume"
	NodeGetInfo               = "NodeGetInfo"
	NodeGetCapabilities       = "NodeGetCapabilities"
	NodeStage                 = "NodeStageVolume"
	NodeUnstage               = "NodeUnstageVolume"
	NodePublish               = "NodePublishVolume"
	NodeUnpublish             = "NodeUnpublishVolume"
)

var methods = map[string]bool{
	GetPluginInfo: true, GetPluginCapabilities: true, Probe: true,
	ControllerGetCapabilities: true, ControllerPublish: true, ControllerUnpublish: true,
	NodeGetInfo: true, NodeGetCapabilities: true,
	NodeStage: true, NodeUnstage: true, NodePublish: true, NodeUnpublish: true,
}

// Options configure a Server.
type Options struct {
	// NodeID is what NodeGetInfo reports (default "csitest-node").
	NodeID string
	// PublishUnpublish advertises the controller PUBLISH_UNPUBLISH_VOLUME capability.
	PublishUnpublish bool
	// StageUnstage advertises the node STAGE_UNSTAGE_VOLUME capability.
	StageUnstage bool
	// Provider is GetPluginInfo's name (default "csitest.volhost.io").
	Provider string
	// MaxVolumes is NodeGetInfo's max_volumes_per_node.
	MaxVolumes int64
	// NodeOnly advertises no CONTROLLER_SERVICE (a node-only driver).
	NodeOnly bool
	// Clock stamps recorded calls (default: the real clock).
	Clock clockwork.Clock
	// Oracle, when set, is the storage and machines this plugin serves,
	// shared with the other plugins started with it: their state is one,
	// and every call is checked against the CSI spec's preconditions there
	// (see Oracle). Without one the Server has its own, which never refuses
	// a call (the permissive model older tests rely on).
	Oracle *Oracle
	// Machine names the machine this plugin's node service runs on (with
	// an Oracle; default NodeID): the staging paths and targets its node
	// calls act on. Plugins started with the same Machine are one machine
	// reached through several endpoints.
	Machine string
	// OnCall, when set, is called with every call as it arrives, before
	// its scripted outcome and outside the server's lock: tests check
	// invariants at the moment a call is made, or make something happen
	// in the middle of an operation (a claim during a release).
	OnCall func(Call)
}

// Result is one scripted outcome of a call.
type Result struct {
	// Code is the gRPC code to answer; codes.OK runs the method normally.
	Code    codes.Code
	Message string
	// Block, when set, holds the call until it is closed (then Code is
	// answered) or the call's context ends (then the context's code is).
	Block <-chan struct{}
	// Ran makes the call run (its effect applied to the Oracle's state,
	// its preconditions checked) before Code is answered: the answer is
	// lost on its way back, as when a connection or a node agent's stream
	// breaks mid-call, or a deadline ends a call the driver finishes. With
	// Block, the call runs once Block is closed, even after its context
	// ended (the driver goes on): the test must close it.
	Ran bool
}

// Lost is the outcome of a call that runs and whose answer is lost: the
// client sees code (Unavailable, DeadlineExceeded) although the effect is
// there.
func Lost(code codes.Code) Result {
	return Result{Code: code, Ran: true, Message: "answer lost after the call ran"}
}

// Call is a recorded request.
type Call struct {
	Seq         int // global order across methods, from 1
	Method      string
	VolumeID    string
	NodeID      string // the request's node ID (ControllerPublish/Unpublish)
	StagingPath string
	TargetPath  string
	Request     proto.Message
	Start, End  time.Time
	Done        bool       // the call has answered
	Code        codes.Code // its answer, once Done
	Caller      string     // the x-volhost-server metadata: which server sent it
}

// Server is a running scripted CSI plugin.
type Server struct {
	t    testing.TB
	opts Options
	dir  string
	sock string

	mu       sync.Mutex
	grpc     *grpc.Server
	served   chan struct{} // closed when the current Serve returns
	scripts  map[string][]Result
	calls    []Call
	inflight map[string]int    // by method
	volIn    map[[2]string]int // by method and volume
	maxIn    map[[2]string]int // by method and volume ("" = any volume)
	oracle   *Oracle
	changed  chan struct{} // closed and replaced on every change
	// abortPending: a call on a volume that has another call of this
	// server in flight answers ABORTED without running (SetAbortPending).
	abortPending bool
}

// NewServer starts a scripted CSI plugin; t.Cleanup stops it and removes
// its socket. Starting one costs a listener and a gRPC server, so tests may
// start many.
func NewServer(t testing.TB, opts Options) *Server {
	t.Helper()
	if opts.NodeID == "" {
		opts.NodeID = "csitest-node"
	}
	if opts.Provider == "" {
		opts.Provider = "csitest.volhost.io"
	}
	if opts.Clock == nil {
		opts.Clock = clockwork.NewRealClock()
	}
	oracle := opts.Oracle
	if oracle == nil {
		oracle = NewOracle()
		oracle.private = true
	}
	if opts.Machine == "" {
		opts.Machine = opts.NodeID
	}
	oracle.join(opts)
	// Not t.TempDir(): unix socket paths are limited to about 104 bytes
	// and test names make those paths long.
	dir, err := os.MkdirTemp("", "csi")
	if err != nil {
		t.Fatalf("csitest: %v", err)
	}
	s := &Server{
		t:        t,
		opts:     opts,
		dir:      dir,
		sock:     filepath.Join(dir, "csi.sock"),
		scripts:  make(map[string][]Result),
		inflight: make(map[string]int),
		volIn:    make(map[[2]string]int),
		maxIn:    make(map[[2]string]int),
		oracle:   oracle,
		changed:  make(chan struct{}),
	}
	t.Cleanup(func() {
		s.Stop()
		_ = os.RemoveAll(dir)
	})
	if err := s.start(); err != nil {
		t.Fatalf("csitest: %v", err)
	}
	return s
}

// Endpoint is the server's "unix:///..." endpoint.
func (s *Server) Endpoint() string { return "unix://" + s.sock }

func (s *Server) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.grpc != nil {
		return nil
	}
	_ = os.Remove(s.sock) // a stale socket file would fail the listen
	lis, err := net.Listen("unix", s.sock)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", s.sock, err)
	}
	g := grpc.NewServer()
	csipb.RegisterIdentityServer(g, identity{s: s})
	csipb.RegisterControllerServer(g, controller{s: s})
	csipb.RegisterNodeServer(g, node{s: s})
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = g.Serve(lis) // returns when Stop closes the listener
	}()
	s.grpc, s.served = g, served
	return nil
}

// Stop kills the server like a crashed driver: the socket goes away, open
// connections drop and calls in flight end with an error on the client side.
// Stopping a stopped server does nothing.
func (s *Server) Stop() {
	s.mu.Lock()
	g, served := s.grpc, s.served
	s.grpc, s.served = nil, nil
	s.mu.Unlock()
	if g == nil {
		return
	}
	g.Stop()
	<-served
}

// Restart serves again on the same socket after Stop (scripts, recorded calls
// and attachments survive, like a driver's backing storage).
func (s *Server) Restart() {
	s.t.Helper()
	if err := s.start(); err != nil {
		s.t.Fatalf("csitest: restart: %v", err)
	}
}

// Script queues outcomes for the next calls of method. When a method's queue
// is empty its calls succeed.
func (s *Server) Script(method string, results ...Result) {
	s.t.Helper()
	if !methods[method] {
		s.t.Fatalf("csitest: Script: unknown method %q", method)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.scripts[method] = append(s.scripts[method], results...)
}

// ClearScripts drops every queued outcome.
func (s *Server) ClearScripts() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.scripts = make(map[string][]Result)
}

// Calls returns the recorded calls of method, in order.
func (s *Server) Calls(method string) []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Call
	for _, c := range s.calls {
		if c.Method == method {
			out = append(out, c)
		}
	}
	return out
}

// AllCalls returns every recorded call in the global order they started.
func (s *Server) AllCalls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Call(nil), s.calls...)
}

// InFlight is how many calls of method are running now.
func (s *Server) InFlight(method string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inflight[method]
}

// MaxInFlight is the most calls of method seen running at once on volumeID,
// or on any volumes together when volumeID is "".
func (s *Server) MaxInFlight(method, volumeID string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.maxIn[[2]string{method, volumeID}]
}

// Attached reports whether volumeID is attached to nodeID: a successful
// ControllerPublish attaches, a successful ControllerUnpublish detaches.
func (s *Server) Attached(volumeID, nodeID string) bool {
	return s.oracle.isAttached(volumeID, nodeID)
}

// NodeID is what NodeGetInfo answers now: what a node agent, which asks
// its plugin at every hello, reports.
func (s *Server) NodeID() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.opts.NodeID
}

// SetNodeID makes NodeGetInfo answer id from now on, as when the machine's
// instance was replaced under the same name: with an Oracle, id is one more
// external node ID of the plugin's machine (the old ones stay its own, so
// an attachment made to them is still found on it).
func (s *Server) SetNodeID(id string) {
	s.mu.Lock()
	s.opts.NodeID = id
	opts := s.opts
	s.mu.Unlock()
	s.oracle.join(opts)
}

// SetAbortPending makes a call on a volume that has another call of this
// server still running (a blocked one whose caller may have left) answer
// ABORTED without running, as the CSI spec's "operation pending for
// volume" error lets a driver do: then a CO that re-sends a call whose
// answer was lost learns when the first one is over. Off by default.
func (s *Server) SetAbortPending(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.abortPending = on
}

// pendingLocked reports whether a call on volume is in flight.
func (s *Server) pendingLocked(volume string) bool {
	for key, n := range s.volIn {
		if key[1] == volume && n > 0 {
			return true
		}
	}
	return false
}

// Oracle is the state this plugin acts on (its own when Options had none).
func (s *Server) Oracle() *Oracle { return s.oracle }

// WaitFor blocks until cond holds or ctx ends. cond is evaluated after every
// recorded change (a call starting or ending), never on a timer, so tests
// synchronise on what the server saw without sleeping. cond may call the
// Server's methods.
func (s *Server) WaitFor(ctx context.Context, cond func() bool) error {
	for {
		s.mu.Lock()
		ch := s.changed
		s.mu.Unlock()
		if cond() {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("csitest: condition not met: %w", ctx.Err())
		}
	}
}

// notifyLocked wakes WaitFor callers.
func (s *Server) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// handle records a call, applies the next scripted outcome and, when that is
// OK, runs ok (the method's model) under the lock.
func (s *Server) handle(ctx context.Context, c Call, ok func(Call) error) error {
	if md, found := metadata.FromIncomingContext(ctx); found {
		if v := md.Get("x-volhost-server"); len(v) > 0 {
			c.Caller = v[0]
		}
	}
	if s.opts.OnCall != nil {
		s.opts.OnCall(c)
	}
	s.mu.Lock()
	c.Seq = len(s.calls) + 1
	c.Start = s.opts.Clock.Now()
	s.calls = append(s.calls, c)
	idx := len(s.calls) - 1
	var r Result
	if s.abortPending && c.VolumeID != "" && s.pendingLocked(c.VolumeID) {
		// Not run and no script consumed: the operation pending answers.
		s.calls[idx].End, s.calls[idx].Done, s.calls[idx].Code = s.opts.Clock.Now(), true, codes.Aborted
		s.notifyLocked()
		s.mu.Unlock()
		return status.Errorf(codes.Aborted, "an operation is pending for volume %s", c.VolumeID)
	}
	if q := s.scripts[c.Method]; len(q) > 0 {
		r, s.scripts[c.Method] = q[0], q[1:]
	}
	all, vol := [2]string{c.Method, ""}, [2]string{c.Method, c.VolumeID}
	s.inflight[c.Method]++
	s.volIn[vol]++
	s.maxIn[all] = max(s.maxIn[all], s.inflight[c.Method])
	s.maxIn[vol] = max(s.maxIn[vol], s.volIn[vol])
	s.notifyLocked()
	s.mu.Unlock()

	var err error
	if r.Block != nil {
		select {
		case <-r.Block:
		case <-ctx.Done():
			err = status.FromContextError(ctx.Err()).Err()
			if r.Ran {
				<-r.Block // the driver goes on after the caller left
			}
		}
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if r.Ran {
		_ = ok(s.calls[idx]) // its answer is lost with the connection
	}
	if err == nil && r.Code != codes.OK {
		msg := r.Message
		if msg == "" {
			msg = "scripted " + r.Code.String()
		}
		err = status.Error(r.Code, msg)
	}
	if err == nil && !r.Ran {
		err = ok(s.calls[idx])
	}
	s.inflight[c.Method]--
	s.volIn[vol]--
	s.calls[idx].End = s.opts.Clock.Now()
	s.calls[idx].Done = true
	s.calls[idx].Code = status.Code(err)
	s.notifyLocked()
	return err
}

func required(field, value string) error {
	if value == "" {
		return status.Errorf(codes.InvalidArgument, "%s is required", field)
	}
	return nil
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func noop(Call) error { return nil }

type identity struct {
	s *Server
	csipb.UnimplementedIdentityServer
}

func (i identity) GetPluginInfo(ctx context.Context, req *csipb.GetPluginInfoRequest) (*csipb.GetPluginInfoResponse, error) {
	if err := i.s.handle(ctx, Call{Method: GetPluginInfo, Request: req}, noop); err != nil {
		return nil, err
	}
	return &csipb.GetPluginInfoResponse{Name: i.s.opts.Provider, VendorVersion: "0.1.0"}, nil
}

func (i identity) GetPluginCapabilities(ctx context.Context, req *csipb.GetPluginCapabilitiesRequest) (*csipb.GetPluginCapabilitiesResponse, error) {
	if err := i.s.handle(ctx, Call{Method: GetPluginCapabilities, Request: req}, noop); err != nil {
		return nil, err
	}
	if i.s.opts.NodeOnly {
		return &csipb.GetPluginCapabilitiesResponse{}, nil
	}
	return &csipb.GetPluginCapabilitiesResponse{Capabilities: []*csipb.PluginCapability{{
		Type: &csipb.PluginCapability_Service_{Service: &csipb.PluginCapability_Service{
			Type: csipb.PluginCapability_Service_CONTROLLER_SERVICE,
		}},
	}}}, nil
}

func (i identity) Probe(ctx context.Context, req *csipb.ProbeRequest) (*csipb.ProbeResponse, error) {
	if err := i.s.handle(ctx, Call{Method: Probe, Request: req}, noop); err != nil {
		return nil, err
	}
	return &csipb.ProbeResponse{}, nil // no ready field: ready (CSI spec)
}

type controller struct {
	s *Server
	csipb.UnimplementedControllerServer
}

func (c controller) ControllerGetCapabilities(ctx context.Context, req *csipb.ControllerGetCapabilitiesRequest) (*csipb.ControllerGetCapabilitiesResponse, error) {
	if err := c.s.handle(ctx, Call{Method: ControllerGetCapabilities, Request: req}, noop); err != nil {
		return nil, err
	}
	resp := &csipb.ControllerGetCapabilitiesResponse{}
	if c.s.opts.PublishUnpublish {
		resp.Capabilities = append(resp.Capabilities, &csipb.ControllerServiceCapability{
			Type: &csipb.ControllerServiceCapability_Rpc{Rpc: &csipb.ControllerServiceCapability_RPC{
				Type: csipb.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME,
			}},
		})
	}
	return resp, nil
}

func (c controller) ControllerPublishVolume(ctx context.Context, req *csipb.ControllerPublishVolumeRequest) (*csipb.ControllerPublishVolumeResponse, error) {
	call := Call{Method: ControllerPublish, VolumeID: req.GetVolumeId(), NodeID: req.GetNodeId(), Request: req}
	err := c.s.handle(ctx, call, func(call Call) error {
		if !c.s.opts.PublishUnpublish {
			return status.Error(codes.Unimplemented, "PUBLISH_UNPUBLISH_VOLUME not advertised")
		}
		if err := firstErr(required("volume_id", req.GetVolumeId()), required("node_id", req.GetNodeId())); err != nil {
			return err
		}
		if req.GetVolumeCapability() == nil {
			return status.Error(codes.InvalidArgument, "volume_capability is required")
		}
		return c.s.oracle.controllerPublish(call, req)
	})
	if err != nil {
		return nil, err
	}
	return &csipb.ControllerPublishVolumeResponse{
		PublishContext: map[string]string{"device": "/dev/csitest/" + req.GetVolumeId()},
	}, nil
}

func (c controller) ControllerUnpublishVolume(ctx context.Context, req *csipb.ControllerUnpublishVolumeRequest) (*csipb.ControllerUnpublishVolumeResponse, error) {
	call := Call{Method: ControllerUnpublish, VolumeID: req.GetVolumeId(), NodeID: req.GetNodeId(), Request: req}
	err := c.s.handle(ctx, call, func(call Call) error {
		if !c.s.opts.PublishUnpublish {
			return status.Error(codes.Unimplemented, "PUBLISH_UNPUBLISH_VOLUME not advertised")
		}
		// node_id is optional in the spec but real drivers (GCE PD) reject
		// an empty one, so the host must always send it.
		if err := firstErr(required("volume_id", req.GetVolumeId()), required("node_id", req.GetNodeId())); err != nil {
			return err
		}
		c.s.oracle.controllerUnpublish(call, req)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &csipb.ControllerUnpublishVolumeResponse{}, nil
}

type node struct {
	s *Server
	csipb.UnimplementedNodeServer
}

func (n node) NodeGetInfo(ctx context.Context, req *csipb.NodeGetInfoRequest) (*csipb.NodeGetInfoResponse, error) {
	if err := n.s.handle(ctx, Call{Method: NodeGetInfo, Request: req}, noop); err != nil {
		return nil, err
	}
	n.s.mu.Lock()
	id := n.s.opts.NodeID
	n.s.mu.Unlock()
	return &csipb.NodeGetInfoResponse{NodeId: id, MaxVolumesPerNode: n.s.opts.MaxVolumes}, nil
}

func (n node) NodeGetCapabilities(ctx context.Context, req *csipb.NodeGetCapabilitiesRequest) (*csipb.NodeGetCapabilitiesResponse, error) {
	if err := n.s.handle(ctx, Call{Method: NodeGetCapabilities, Request: req}, noop); err != nil {
		return nil, err
	}
	resp := &csipb.NodeGetCapabilitiesResponse{}
	if n.s.opts.StageUnstage {
		resp.Capabilities = append(resp.Capabilities, &csipb.NodeServiceCapability{
			Type: &csipb.NodeServiceCapability_Rpc{Rpc: &csipb.NodeServiceCapability_RPC{
				Type: csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME,
			}},
		})
	}
	return resp, nil
}

func (n node) stages() error {
	if !n.s.opts.StageUnstage {
		return status.Error(codes.Unimplemented, "STAGE_UNSTAGE_VOLUME not advertised")
	}
	return nil
}

func (n node) NodeStageVolume(ctx context.Context, req *csipb.NodeStageVolumeRequest) (*csipb.NodeStageVolumeResponse, error) {
	call := Call{Method: NodeStage, VolumeID: req.GetVolumeId(), StagingPath: req.GetStagingTargetPath(), Request: req}
	err := n.s.handle(ctx, call, func(call Call) error {
		if req.GetVolumeCapability() == nil {
			return status.Error(codes.InvalidArgument, "volume_capability is required")
		}
		if err := firstErr(n.stages(), required("volume_id", req.GetVolumeId()),
			required("staging_target_path", req.GetStagingTargetPath())); err != nil {
			return err
		}
		n.s.oracle.nodeStage(n.s.opts.Machine, call, req)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &csipb.NodeStageVolumeResponse{}, nil
}

func (n node) NodeUnstageVolume(ctx context.Context, req *csipb.NodeUnstageVolumeRequest) (*csipb.NodeUnstageVolumeResponse, error) {
	call := Call{Method: NodeUnstage, VolumeID: req.GetVolumeId(), StagingPath: req.GetStagingTargetPath(), Request: req}
	err := n.s.handle(ctx, call, func(call Call) error {
		if err := firstErr(n.stages(), required("volume_id", req.GetVolumeId()),
			required("staging_target_path", req.GetStagingTargetPath())); err != nil {
			return err
		}
		n.s.oracle.nodeUnstage(n.s.opts.Machine, call, req)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &csipb.NodeUnstageVolumeResponse{}, nil
}

func (n node) NodePublishVolume(ctx context.Context, req *csipb.NodePublishVolumeRequest) (*csipb.NodePublishVolumeResponse, error) {
	call := Call{Method: NodePublish, VolumeID: req.GetVolumeId(), StagingPath: req.GetStagingTargetPath(),
		TargetPath: req.GetTargetPath(), Request: req}
	err := n.s.handle(ctx, call, func(call Call) error {
		if req.GetVolumeCapability() == nil {
			return status.Error(codes.InvalidArgument, "volume_capability is required")
		}
		if n.s.opts.StageUnstage && req.GetStagingTargetPath() == "" {
			return status.Error(codes.FailedPrecondition, "staging_target_path is required: the plugin stages")
		}
		if err := firstErr(required("volume_id", req.GetVolumeId()), required("target_path", req.GetTargetPath())); err != nil {
			return err
		}
		n.s.oracle.nodePublish(n.s.opts.Machine, n.s.opts.StageUnstage, call, req)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &csipb.NodePublishVolumeResponse{}, nil
}

func (n node) NodeUnpublishVolume(ctx context.Context, req *csipb.NodeUnpublishVolumeRequest) (*csipb.NodeUnpublishVolumeResponse, error) {
	call := Call{Method: NodeUnpublish, VolumeID: req.GetVolumeId(), TargetPath: req.GetTargetPath(), Request: req}
	err := n.s.handle(ctx, call, func(call Call) error {
		if err := firstErr(required("volume_id", req.GetVolumeId()), required("target_path", req.GetTargetPath())); err != nil {
			return err
		}
		n.s.oracle.nodeUnpublish(n.s.opts.Machine, req)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &csipb.NodeUnpublishVolumeResponse{}, nil
}
