package csi_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/volhost/volhost/host/csi"
	"github.com/volhost/volhost/host/csi/csitest"
	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/watcher/attach"
)

// waitCtx bounds every wait in these tests, so a broken feature fails the
// test instead of hanging it.
func waitCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func newClient(t *testing.T, cfg csi.Config) *csi.Client {
	t.Helper()
	c := csi.New(cfg)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// calls runs every CSI RPC the host makes on a claim, by method name.
var calls = map[string]func(ctx context.Context, c *csi.Client, ep string) error{
	csitest.ControllerPublish: func(ctx context.Context, c *csi.Client, ep string) error {
		_, err := c.ControllerPublishVolume(ctx, ep, &csipb.ControllerPublishVolumeRequest{
			VolumeId: "vol1", NodeId: "ext-node1",
			VolumeCapability: csi.Capability(structs.AccessSingleNodeWriter, structs.AttachFilesystem, "ext4", nil),
		})
		return err
	},
	csitest.NodeStage: func(ctx context.Context, c *csi.Client, ep string) error {
		return c.NodeStageVolume(ctx, ep, &csipb.NodeStageVolumeRequest{
			VolumeId: "vol1", StagingTargetPath: "/root/staging/vol1",
			VolumeCapability: csi.Capability(structs.AccessSingleNodeWriter, structs.AttachFilesystem, "ext4", nil),
		})
	},
	csitest.NodePublish: func(ctx context.Context, c *csi.Client, ep string) error {
		return c.NodePublishVolume(ctx, ep, &csipb.NodePublishVolumeRequest{
			VolumeId: "vol1", StagingTargetPath: "/root/staging/vol1", TargetPath: "/root/alloc1/vol1",
			VolumeCapability: csi.Capability(structs.AccessSingleNodeWriter, structs.AttachFilesystem, "ext4", nil),
		})
	},
	csitest.NodeUnpublish: func(ctx context.Context, c *csi.Client, ep string) error {
		return c.NodeUnpublishVolume(ctx, ep, &csipb.NodeUnpublishVolumeRequest{VolumeId: "vol1", TargetPath: "/root/alloc1/vol1"})
	},
	csitest.NodeUnstage: func(ctx context.Context, c *csi.Client, ep string) error {
		return c.NodeUnstageVolume(ctx, ep, &csipb.NodeUnstageVolumeRequest{VolumeId: "vol1", StagingTargetPath: "/root/staging/vol1"})
	},
	csitest.ControllerUnpublish: func(ctx context.Context, c *csi.Client, ep string) error {
		return c.ControllerUnpublishVolume(ctx, ep, &csipb.ControllerUnpublishVolumeRequest{VolumeId: "vol1", NodeId: "ext-node1"})
	},
}

// claimOrder is the order a claim's life makes the calls in.
var claimOrder = []string{
	csitest.ControllerPublish, csitest.NodeStage, csitest.NodePublish,
	csitest.NodeUnpublish, csitest.NodeUnstage, csitest.ControllerUnpublish,
}

func TestClientClaimLifecycleOK(t *testing.T) {
	srv := csitest.NewServer(t, csitest.Options{PublishUnpublish: true, StageUnstage: true})
	c := newClient(t, csi.Config{})
	ctx := waitCtx(t)

	resp, err := c.ControllerPublishVolume(ctx, srv.Endpoint(), &csipb.ControllerPublishVolumeRequest{
		VolumeId: "vol1", NodeId: "ext-node1",
		VolumeCapability: csi.Capability(structs.AccessSingleNodeWriter, structs.AttachFilesystem, "ext4", nil),
	})
	if err != nil {
		t.Fatalf("ControllerPublishVolume: %v", err)
	}
	if resp.GetPublishContext()["device"] == "" {
		t.Errorf("publish context %v: want the driver's device", resp.GetPublishContext())
	}
	if !srv.Attached("vol1", "ext-node1") {
		t.Fatalf("vol1 not attached to ext-node1 after publish")
	}
	for _, m := range claimOrder[1:] {
		if err := calls[m](ctx, c, srv.Endpoint()); err != nil {
			t.Fatalf("%s: %v", m, err)
		}
	}
	if srv.Attached("vol1", "ext-node1") {
		t.Errorf("vol1 still attached after ControllerUnpublishVolume")
	}

	got := srv.AllCalls()
	if len(got) != len(claimOrder) {
		t.Fatalf("server saw %d calls, want %d: %+v", len(got), len(claimOrder), got)
	}
	for i, m := range claimOrder {
		if got[i].Method != m || got[i].VolumeID != "vol1" || got[i].Code != codes.OK || !got[i].Done {
			t.Errorf("call %d = %s %s %s done=%v, want %s vol1 OK", i, got[i].Method, got[i].VolumeID, got[i].Code, got[i].Done, m)
		}
	}
	if n := srv.Calls(csitest.ControllerUnpublish)[0].NodeID; n != "ext-node1" {
		t.Errorf("ControllerUnpublish node ID = %q, want ext-node1", n)
	}
	if p := srv.Calls(csitest.NodePublish)[0]; p.TargetPath != "/root/alloc1/vol1" || p.StagingPath != "/root/staging/vol1" {
		t.Errorf("NodePublish paths = %q %q", p.StagingPath, p.TargetPath)
	}
}

func TestClientKeepsGRPCCode(t *testing.T) {
	srv := csitest.NewServer(t, csitest.Options{PublishUnpublish: true, StageUnstage: true})
	c := newClient(t, csi.Config{})
	ctx := waitCtx(t)

	for _, code := range []codes.Code{codes.OK, codes.NotFound, codes.Aborted, codes.Unavailable,
		codes.DeadlineExceeded, codes.Internal, codes.Unimplemented} {
		for _, method := range claimOrder {
			t.Run(code.String()+"/"+method, func(t *testing.T) {
				srv.Script(method, csitest.Result{Code: code, Message: "scripted"})
				err := calls[method](ctx, c, srv.Endpoint())
				if code == codes.OK {
					if err != nil {
						t.Fatalf("want OK, got %v", err)
					}
					return
				}
				if got := status.Code(err); got != code {
					t.Fatalf("status.Code = %s, want %s (err %v)", got, code, err)
				}
				// Still the code after the caller wraps it.
				if got := status.Code(fmt.Errorf("release: %w", err)); got != code {
					t.Errorf("status.Code through %%w = %s, want %s", got, code)
				}
				var ce *csi.Error
				if !errors.As(err, &ce) || ce.Method != method || ce.Endpoint != srv.Endpoint() || ce.Code() != code {
					t.Fatalf("errors.As *csi.Error = %+v, want method %s", ce, method)
				}
				if !strings.Contains(err.Error(), method) || !strings.Contains(err.Error(), "scripted") {
					t.Errorf("error %q should name the method and keep the driver's message", err)
				}
			})
		}
	}
}

func TestClientCallDeadlines(t *testing.T) {
	tests := []struct {
		name        string
		callTimeout time.Duration
		ctxTimeout  time.Duration // 0: no ctx deadline
	}{
		{"call timeout cuts a hanging call", 100 * time.Millisecond, 0},
		{"sooner ctx deadline wins", time.Hour, 100 * time.Millisecond},
		{"call timeout cuts a later ctx deadline", 100 * time.Millisecond, time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := csitest.NewServer(t, csitest.Options{PublishUnpublish: true})
			c := newClient(t, csi.Config{CallTimeout: tt.callTimeout})
			hang := make(chan struct{})
			defer close(hang)
			srv.Script(csitest.ControllerUnpublish, csitest.Result{Block: hang})

			ctx := context.Background()
			if tt.ctxTimeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tt.ctxTimeout)
				defer cancel()
			}
			err := calls[csitest.ControllerUnpublish](ctx, c, srv.Endpoint())
			if got := status.Code(err); got != codes.DeadlineExceeded {
				t.Fatalf("status.Code = %s, want DeadlineExceeded (err %v)", got, err)
			}
			// The driver saw its context end too: nothing left running.
			err = srv.WaitFor(waitCtx(t), func() bool {
				cs := srv.Calls(csitest.ControllerUnpublish)
				return len(cs) == 1 && cs[0].Done
			})
			if err != nil {
				t.Fatal(err)
			}
			// Which of the two the driver sees races the client's stream
			// reset against the propagated deadline; either means cut.
			if got := srv.Calls(csitest.ControllerUnpublish)[0].Code; got != codes.DeadlineExceeded && got != codes.Canceled {
				t.Errorf("server side code = %s, want its context ended", got)
			}
		})
	}
}

func TestClientCancel(t *testing.T) {
	srv := csitest.NewServer(t, csitest.Options{PublishUnpublish: true})
	c := newClient(t, csi.Config{})
	hang := make(chan struct{})
	defer close(hang)
	srv.Script(csitest.ControllerUnpublish, csitest.Result{Block: hang})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- calls[csitest.ControllerUnpublish](ctx, c, srv.Endpoint()) }()

	if err := srv.WaitFor(waitCtx(t), func() bool { return srv.InFlight(csitest.ControllerUnpublish) == 1 }); err != nil {
		t.Fatal(err)
	}
	cancel() // e.g. leadership lost
	select {
	case err := <-errc:
		if got := status.Code(err); got != codes.Canceled {
			t.Fatalf("status.Code = %s, want Canceled (err %v)", got, err)
		}
	case <-waitCtx(t).Done():
		t.Fatal("cancelled call did not return")
	}
	if err := srv.WaitFor(waitCtx(t), func() bool { return srv.InFlight(csitest.ControllerUnpublish) == 0 }); err != nil {
		t.Fatalf("driver call still running after cancel: %v", err)
	}
}

type observed struct {
	method string
	code   codes.Code
}

type recorder struct {
	mu  sync.Mutex
	obs []observed
}

func (r *recorder) ObserveCall(method string, code codes.Code, _ time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.obs = append(r.obs, observed{method, code})
}

func TestClientBadEndpoint(t *testing.T) {
	rec := &recorder{}
	c := newClient(t, csi.Config{Metrics: rec})
	for _, ep := range []string{
		"",
		"/var/run/csi.sock",
		"http://127.0.0.1:80",
		"unix://relative/csi.sock",
		"unix:///",
		"tcp://127.0.0.1",
		"tcp://:9000/path",
		"dns:///example.com:443",
	} {
		t.Run(ep, func(t *testing.T) {
			err := calls[csitest.ControllerUnpublish](waitCtx(t), c, ep)
			var ve *structs.ValidationError
			if !errors.As(err, &ve) || ve.Field != "endpoint" {
				t.Fatalf("err = %v, want a validation error on field endpoint", err)
			}
			if !strings.Contains(err.Error(), fmt.Sprintf("%q", ep)) {
				t.Errorf("error %q does not name the endpoint %q", err, ep)
			}
			if _, err := c.ProbeController(waitCtx(t), ep); !errors.As(err, &ve) {
				t.Errorf("ProbeController(%q) = %v, want a validation error", ep, err)
			}
		})
	}
	if len(rec.obs) != 0 {
		t.Errorf("bad endpoints were counted as CSI calls: %v", rec.obs)
	}
}

func TestClientProbe(t *testing.T) {
	tests := []struct {
		opts csitest.Options
	}{
		{csitest.Options{Provider: "pd.csi.example", NodeID: "projects/p/zones/z/instances/n1", PublishUnpublish: true, StageUnstage: true, MaxVolumes: 16}},
		{csitest.Options{Provider: "hostpath.csi.example", NodeID: "n2"}},
		{csitest.Options{Provider: "nodeonly.csi.example", NodeID: "n3", NodeOnly: true}},
	}
	for _, tt := range tests {
		t.Run(tt.opts.Provider, func(t *testing.T) {
			srv := csitest.NewServer(t, tt.opts)
			c := newClient(t, csi.Config{})
			ctx := waitCtx(t)

			np, err := c.ProbeNode(ctx, srv.Endpoint())
			if err != nil {
				t.Fatalf("ProbeNode: %v", err)
			}
			wantNode := structs.NodePlugin{Endpoint: srv.Endpoint(), ExternalNodeID: tt.opts.NodeID,
				StageUnstage: tt.opts.StageUnstage, MaxVolumes: tt.opts.MaxVolumes, ControllerService: !tt.opts.NodeOnly}
			if *np != wantNode {
				t.Errorf("ProbeNode = %+v, want %+v", *np, wantNode)
			}
			if tt.opts.NodeOnly {
				return // ProbeController refuses it (TestClientProbeRefusals)
			}

			p, err := c.ProbeController(ctx, srv.Endpoint())
			if err != nil {
				t.Fatalf("ProbeController: %v", err)
			}
			want := structs.Plugin{ControllerEndpoint: srv.Endpoint(), Provider: tt.opts.Provider, Version: "0.1.0",
				Capabilities: structs.ControllerCapabilities{PublishUnpublish: tt.opts.PublishUnpublish}}
			if *p != want {
				t.Errorf("ProbeController = %+v, want %+v", *p, want)
			}
		})
	}
}

func TestClientProbeErrors(t *testing.T) {
	tests := []struct {
		method string
		code   codes.Code
	}{
		{csitest.GetPluginInfo, codes.Unavailable},
		{csitest.Probe, codes.FailedPrecondition},
		{csitest.GetPluginCapabilities, codes.Internal},
		{csitest.ControllerGetCapabilities, codes.Unimplemented},
	}
	for _, tt := range tests {
		t.Run(tt.method, func(t *testing.T) {
			srv := csitest.NewServer(t, csitest.Options{PublishUnpublish: true})
			c := newClient(t, csi.Config{})
			srv.Script(tt.method, csitest.Result{Code: tt.code})
			p, err := c.ProbeController(waitCtx(t), srv.Endpoint())
			if p != nil || status.Code(err) != tt.code {
				t.Fatalf("ProbeController = %v, %v; want code %s", p, err, tt.code)
			}
		})
	}
	t.Run("node probe", func(t *testing.T) {
		srv := csitest.NewServer(t, csitest.Options{})
		c := newClient(t, csi.Config{})
		srv.Script(csitest.NodeGetInfo, csitest.Result{Code: codes.Unavailable})
		if _, err := c.ProbeNode(waitCtx(t), srv.Endpoint()); status.Code(err) != codes.Unavailable {
			t.Fatalf("ProbeNode err = %v, want Unavailable", err)
		}
	})
}

// A plugin reached over tcp:// that serves only the Identity service with
// nothing implemented: the dial works and the driver's code comes back.
func TestClientTCPEndpoint(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	csipb.RegisterIdentityServer(g, csipb.UnimplementedIdentityServer{})
	done := make(chan struct{})
	go func() { defer close(done); _ = g.Serve(lis) }()
	t.Cleanup(func() { g.Stop(); <-done })

	c := newClient(t, csi.Config{})
	_, err = c.ProbeController(waitCtx(t), "tcp://"+lis.Addr().String())
	if status.Code(err) != codes.Unimplemented {
		t.Fatalf("ProbeController over tcp = %v, want Unimplemented", err)
	}
}

func TestClientStopRestart(t *testing.T) {
	srv := csitest.NewServer(t, csitest.Options{PublishUnpublish: true})
	c := newClient(t, csi.Config{})
	ctx := waitCtx(t)
	unpublish := calls[csitest.ControllerUnpublish]

	if err := unpublish(ctx, c, srv.Endpoint()); err != nil {
		t.Fatalf("before stop: %v", err)
	}
	srv.Stop()
	// Twice: once on the dropped connection, once on the failed reconnect.
	for i := range 2 {
		if err := unpublish(ctx, c, srv.Endpoint()); status.Code(err) != codes.Unavailable {
			t.Fatalf("stopped driver, call %d: err = %v, want Unavailable", i, err)
		}
	}
	srv.Restart()
	if err := unpublish(ctx, c, srv.Endpoint()); err != nil {
		t.Fatalf("first call after restart: %v", err)
	}
	if n := len(srv.Calls(csitest.ControllerUnpublish)); n != 2 {
		t.Errorf("driver saw %d ControllerUnpublish calls, want 2", n)
	}
}

func TestClientMetricsAndLogs(t *testing.T) {
	srv := csitest.NewServer(t, csitest.Options{PublishUnpublish: true})
	rec := &recorder{}
	var buf bytes.Buffer
	var bufMu sync.Mutex
	log := hclog.New(&hclog.LoggerOptions{Level: hclog.Trace, Output: &lockedWriter{w: &buf, mu: &bufMu}})
	c := newClient(t, csi.Config{Metrics: rec, Logger: log})
	ctx := waitCtx(t)

	srv.Script(csitest.ControllerUnpublish, csitest.Result{Code: codes.Aborted})
	secrets := map[string]string{"password": "hunter2-secret"}
	for range 2 {
		_ = c.ControllerUnpublishVolume(ctx, srv.Endpoint(), &csipb.ControllerUnpublishVolumeRequest{
			VolumeId: "vol-logged", NodeId: "node-logged", Secrets: secrets})
	}
	_, _ = c.ControllerPublishVolume(ctx, srv.Endpoint(), &csipb.ControllerPublishVolumeRequest{
		VolumeId: "vol-logged", NodeId: "node-logged", Secrets: secrets,
		VolumeCapability: csi.Capability(structs.AccessSingleNodeWriter, structs.AttachFilesystem, "", nil)})

	want := []observed{
		{csitest.ControllerUnpublish, codes.Aborted},
		{csitest.ControllerUnpublish, codes.OK},
		{csitest.ControllerPublish, codes.OK},
	}
	if fmt.Sprint(rec.obs) != fmt.Sprint(want) {
		t.Errorf("observed %v, want %v", rec.obs, want)
	}
	bufMu.Lock()
	out := buf.String()
	bufMu.Unlock()
	if strings.Contains(out, "hunter2") {
		t.Errorf("secrets logged (CSI spec forbids it):\n%s", out)
	}
	if !strings.Contains(out, "vol-logged") || !strings.Contains(out, "node-logged") || !strings.Contains(out, "Aborted") {
		t.Errorf("log lacks volume, node or code:\n%s", out)
	}
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func TestClientClosed(t *testing.T) {
	srv := csitest.NewServer(t, csitest.Options{PublishUnpublish: true})
	c := csi.New(csi.Config{})
	if err := calls[csitest.ControllerUnpublish](waitCtx(t), c, srv.Endpoint()); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := calls[csitest.ControllerUnpublish](waitCtx(t), c, srv.Endpoint()); !errors.Is(err, csi.ErrClosed) {
		t.Fatalf("after Close: %v, want ErrClosed", err)
	}
}

// A connection retired after an Unavailable answer stays open for the calls
// still running on it, and the next call gets a fresh connection.
func TestClientRetiredConnKeepsCallsInFlight(t *testing.T) {
	srv := csitest.NewServer(t, csitest.Options{PublishUnpublish: true})
	c := newClient(t, csi.Config{})
	ctx := waitCtx(t)
	unpublish := calls[csitest.ControllerUnpublish]
	release := make(chan struct{})
	srv.Script(csitest.ControllerUnpublish, csitest.Result{Block: release}, csitest.Result{Code: codes.Unavailable})

	errc := make(chan error, 1)
	go func() { errc <- unpublish(ctx, c, srv.Endpoint()) }()
	if err := srv.WaitFor(ctx, func() bool { return srv.InFlight(csitest.ControllerUnpublish) == 1 }); err != nil {
		t.Fatal(err)
	}
	if err := unpublish(ctx, c, srv.Endpoint()); status.Code(err) != codes.Unavailable {
		t.Fatalf("second call: %v, want Unavailable", err)
	}
	if err := unpublish(ctx, c, srv.Endpoint()); err != nil {
		t.Fatalf("third call, on a fresh connection: %v", err)
	}
	close(release)
	if err := <-errc; err != nil {
		t.Fatalf("call in flight on the retired connection: %v", err)
	}
}

// oddPlugin answers what csitest never does: not ready, no controller
// service, an empty node ID.
type oddPlugin struct {
	csipb.UnimplementedIdentityServer
	csipb.UnimplementedNodeServer
	ready bool
}

func (o oddPlugin) GetPluginInfo(context.Context, *csipb.GetPluginInfoRequest) (*csipb.GetPluginInfoResponse, error) {
	return &csipb.GetPluginInfoResponse{Name: "odd", VendorVersion: "1"}, nil
}

func (o oddPlugin) Probe(context.Context, *csipb.ProbeRequest) (*csipb.ProbeResponse, error) {
	return &csipb.ProbeResponse{Ready: wrapperspb.Bool(o.ready)}, nil
}

func (o oddPlugin) GetPluginCapabilities(context.Context, *csipb.GetPluginCapabilitiesRequest) (*csipb.GetPluginCapabilitiesResponse, error) {
	return &csipb.GetPluginCapabilitiesResponse{}, nil // node-only plugin
}

func (o oddPlugin) NodeGetInfo(context.Context, *csipb.NodeGetInfoRequest) (*csipb.NodeGetInfoResponse, error) {
	return &csipb.NodeGetInfoResponse{}, nil
}

func TestClientProbeRefusals(t *testing.T) {
	serve := func(t *testing.T, p oddPlugin) string {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		g := grpc.NewServer()
		csipb.RegisterIdentityServer(g, p)
		csipb.RegisterNodeServer(g, p)
		done := make(chan struct{})
		go func() { defer close(done); _ = g.Serve(lis) }()
		t.Cleanup(func() { g.Stop(); <-done })
		return "tcp://" + lis.Addr().String()
	}
	tests := []struct {
		name  string
		ready bool
		probe func(context.Context, *csi.Client, string) error
		want  error
	}{
		{"controller not ready", false, func(ctx context.Context, c *csi.Client, ep string) error {
			_, err := c.ProbeController(ctx, ep)
			return err
		}, csi.ErrNotReady},
		{"node not ready", false, func(ctx context.Context, c *csi.Client, ep string) error {
			_, err := c.ProbeNode(ctx, ep)
			return err
		}, csi.ErrNotReady},
		{"no controller service", true, func(ctx context.Context, c *csi.Client, ep string) error {
			_, err := c.ProbeController(ctx, ep)
			return err
		}, csi.ErrNoControllerService},
		{"empty node id", true, func(ctx context.Context, c *csi.Client, ep string) error {
			_, err := c.ProbeNode(ctx, ep)
			return err
		}, csi.ErrNoNodeID},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ep := serve(t, oddPlugin{ready: tt.ready})
			err := tt.probe(waitCtx(t), newClient(t, csi.Config{}), ep)
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), ep) {
				t.Fatalf("err = %v, want %v naming %s", err, tt.want, ep)
			}
		})
	}
}

// Every call names the server that sent it (Config.Caller), so a driver's
// log shows which volhost server made each call.
func TestClientSendsCaller(t *testing.T) {
	srv := csitest.NewServer(t, csitest.Options{PublishUnpublish: true})
	c := csi.New(csi.Config{Caller: "server-2"})
	t.Cleanup(func() { c.Close() })
	err := c.ControllerUnpublishVolume(context.Background(), srv.Endpoint(),
		&csipb.ControllerUnpublishVolumeRequest{VolumeId: "vol-1", NodeId: "node-1"})
	if err != nil {
		t.Fatal(err)
	}
	if calls := srv.Calls(csitest.ControllerUnpublish); len(calls) != 1 || calls[0].Caller != "server-2" {
		t.Fatalf("calls %+v, want one from server-2", calls)
	}
}

// TestDriverEchoedSecretsAreRedacted: a driver that echoes a secret it
// was sent in its error ("login failed for password hunter2-secret")
// would carry it into the caller's error: the claimant's API answer, a
// claim's last error, events and logs, for anyone who may read them. The
// call's error names every secret value it carries as <redacted>, and
// keeps its code and the rest of the message.
func TestDriverEchoedSecretsAreRedacted(t *testing.T) {
	srv := csitest.NewServer(t, csitest.Options{PublishUnpublish: true, StageUnstage: true})
	var buf bytes.Buffer
	var bufMu sync.Mutex
	log := hclog.New(&hclog.LoggerOptions{Level: hclog.Trace, Output: &lockedWriter{w: &buf, mu: &bufMu}})
	c := newClient(t, csi.Config{Logger: log})
	ctx := waitCtx(t)
	secrets := map[string]string{"password": "hunter2-secret", "user": "admin-ops"}
	echo := "login failed for admin-ops with password hunter2-secret (hunter2-secret)"
	capability := csi.Capability(structs.AccessSingleNodeWriter, structs.AttachFilesystem, "", nil)
	for method, call := range map[string]func() error{
		csitest.ControllerPublish: func() error {
			_, err := c.ControllerPublishVolume(ctx, srv.Endpoint(), &csipb.ControllerPublishVolumeRequest{
				VolumeId: "v", NodeId: "n", Secrets: secrets, VolumeCapability: capability})
			return err
		},
		csitest.ControllerUnpublish: func() error {
			return c.ControllerUnpublishVolume(ctx, srv.Endpoint(), &csipb.ControllerUnpublishVolumeRequest{VolumeId: "v", NodeId: "n", Secrets: secrets})
		},
		csitest.NodeStage: func() error {
			return c.NodeStageVolume(ctx, srv.Endpoint(), &csipb.NodeStageVolumeRequest{VolumeId: "v", StagingTargetPath: t.TempDir(),
				Secrets: secrets, VolumeCapability: capability})
		},
		csitest.NodePublish: func() error {
			return c.NodePublishVolume(ctx, srv.Endpoint(), &csipb.NodePublishVolumeRequest{VolumeId: "v", TargetPath: t.TempDir(),
				Secrets: secrets, VolumeCapability: capability})
		},
	} {
		srv.Script(method, csitest.Result{Code: codes.PermissionDenied, Message: echo})
		err := call()
		if status.Code(err) != codes.PermissionDenied {
			t.Fatalf("%s: %v, want the driver's PermissionDenied", method, err)
		}
		if msg := err.Error(); strings.Contains(msg, "hunter2") || strings.Contains(msg, "admin-ops") ||
			!strings.Contains(msg, "login failed for <redacted> with password <redacted> (<redacted>)") {
			t.Fatalf("%s: error %q, want the driver's message with every secret value redacted", method, msg)
		}
		if msg := status.Convert(err).Message(); strings.Contains(msg, "hunter2") {
			t.Fatalf("%s: the status message carries the secret: %q", method, msg)
		}
	}
	bufMu.Lock()
	defer bufMu.Unlock()
	if strings.Contains(buf.String(), "hunter2") {
		t.Fatalf("a secret echoed by the driver was logged:\n%s", buf.String())
	}
}

// pausedLeader confirms its term, then finds its confirmation expired
// when asked again: a leader paused between the confirmation and the call.
type pausedLeader struct{}

func (pausedLeader) ConfirmLeader(context.Context, uint64) error { return nil }
func (pausedLeader) StillConfirmed(uint64) error {
	return fmt.Errorf("confirmed a lease ago: %w", structs.ErrNoLeader)
}

// The leader's fence is checked again right before a call leaves the
// client: after a confirmation that no longer holds, no call reaches the
// driver and the caller gets the not-sent error, never a driver's.
func TestClientChecksTheFenceBeforeSending(t *testing.T) {
	srv := csitest.NewServer(t, csitest.Options{PublishUnpublish: true, StageUnstage: true})
	c := newClient(t, csi.Config{})
	ctx := waitCtx(t)
	for _, method := range claimOrder {
		err := attach.Call(ctx, pausedLeader{}, 1, 0, func(ctx context.Context) error { return calls[method](ctx, c, srv.Endpoint()) })
		var ns *attach.NotSent
		if !errors.As(err, &ns) || !errors.Is(err, structs.ErrNoLeader) {
			t.Errorf("%s: %v, want a not-sent error", method, err)
		}
		if n := len(srv.Calls(method)); n != 0 {
			t.Errorf("%s reached the driver %d times after the leader's confirmation expired", method, n)
		}
	}
}
