// Command mockcsi serves the csi-test v5.6.0 gomock driver
// (github.com/kubernetes-csi/csi-test/v5/driver) on a unix socket, with
// controller and node services, answering every CSI call volhost makes and
// failing them on a scripted error sequence:
//
//	mockcsi -endpoint /tmp/m.sock -node-id n1 \
//	    -script 'ControllerUnpublishVolume=Unavailable,Unavailable,OK,Internal;NodeUnpublishVolume=Aborted'
//
// Each code is used once, in order, then calls succeed. The control socket
// (-control) serves the same API as gcepd's (POST /fault, GET /calls) so a
// test can script further errors at run time.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	mockdriver "github.com/kubernetes-csi/csi-test/v5/driver"
	"go.uber.org/mock/gomock"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/volhost/volhost/test/peers/internal/control"
	"github.com/volhost/volhost/test/peers/internal/fault"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "mockcsi:", err)
		os.Exit(1)
	}
}

// reporter turns a gomock failure (an unexpected call) into a loud exit:
// every call volhost makes is expected, so one that is not is a bug to see.
type reporter struct{}

func (reporter) Errorf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "mockcsi: "+format+"\n", args...)
}
func (reporter) Fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "mockcsi: "+format+"\n", args...)
	os.Exit(2)
}

// ParseScript turns "M=C1,C2;M2=C3" into Count 1 rules, in order.
func ParseScript(s string) ([]fault.Rule, error) {
	var rules []fault.Rule
	for _, part := range strings.Split(s, ";") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		method, codes, ok := strings.Cut(part, "=")
		if !ok || method == "" || codes == "" {
			return nil, fmt.Errorf("script %q: want METHOD=CODE[,CODE...]", part)
		}
		for _, c := range strings.Split(codes, ",") {
			rules = append(rules, fault.Rule{Method: strings.TrimSpace(method), Code: strings.TrimSpace(c), Count: 1})
		}
	}
	return rules, nil
}

func run() error {
	var (
		endpoint    = flag.String("endpoint", "", "unix socket path to serve CSI on (required)")
		controlSock = flag.String("control", "", "unix socket path for the HTTP control endpoint; empty: none")
		name        = flag.String("name", "mock.csi.volhost", "plugin name reported by GetPluginInfo")
		nodeID      = flag.String("node-id", "mock-node", "external node ID reported by NodeGetInfo")
		script      = flag.String("script", "", "scripted error sequence: METHOD=CODE[,CODE...][;METHOD=...]")
	)
	flag.Parse()
	if *endpoint == "" {
		return errors.New("-endpoint is required")
	}
	rules, err := ParseScript(*script)
	if err != nil {
		return err
	}
	inj := fault.New()
	if err := inj.Arm(rules...); err != nil {
		return err
	}

	ctrl := gomock.NewController(reporter{})
	ids := mockdriver.NewMockIdentityServer(ctrl)
	cs := mockdriver.NewMockControllerServer(ctrl)
	ns := mockdriver.NewMockNodeServer(ctrl)
	expect(inj, ids, cs, ns, *name, *nodeID)

	drv := mockdriver.NewMockCSIDriver(&mockdriver.MockCSIDriverServers{Identity: ids, Controller: cs, Node: ns})
	_ = os.Remove(*endpoint)
	if err := drv.StartOnAddress("unix", *endpoint); err != nil {
		return fmt.Errorf("serving on %s: %w", *endpoint, err)
	}
	defer drv.Stop()

	if *controlSock != "" {
		_ = os.Remove(*controlSock)
		l, err := net.Listen("unix", *controlSock)
		if err != nil {
			return fmt.Errorf("listen %s: %w", *controlSock, err)
		}
		srv := &http.Server{Handler: control.Handler(inj, nil), ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = srv.Serve(l) }()
		defer srv.Close()
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	fmt.Fprintf(os.Stderr, "mockcsi: serving on %s (%d scripted errors)\n", *endpoint, len(rules))
	<-ctx.Done()
	return nil
}

// do wraps a canned answer in the injector, which records the call and
// applies the scripted error sequence.
func do[Req any, Resp any](inj *fault.Injector, method string, answer func(Req) Resp) func(context.Context, Req) (Resp, error) {
	return func(ctx context.Context, req Req) (Resp, error) {
		var zero Resp
		r, err := inj.Apply(ctx, "mock", method, req, func(context.Context) (any, error) { return answer(req), nil })
		if err != nil {
			return zero, err
		}
		return r.(Resp), nil
	}
}

func expect(inj *fault.Injector, ids *mockdriver.MockIdentityServer, cs *mockdriver.MockControllerServer, ns *mockdriver.MockNodeServer, name, nodeID string) {
	a := gomock.Any()
	ids.EXPECT().GetPluginInfo(a, a).DoAndReturn(do(inj, "GetPluginInfo", func(*csi.GetPluginInfoRequest) *csi.GetPluginInfoResponse {
		return &csi.GetPluginInfoResponse{Name: name, VendorVersion: "csi-test-v5.6.0"}
	})).AnyTimes()
	ids.EXPECT().GetPluginCapabilities(a, a).DoAndReturn(do(inj, "GetPluginCapabilities", func(*csi.GetPluginCapabilitiesRequest) *csi.GetPluginCapabilitiesResponse {
		return &csi.GetPluginCapabilitiesResponse{Capabilities: []*csi.PluginCapability{{Type: &csi.PluginCapability_Service_{
			Service: &csi.PluginCapability_Service{Type: csi.PluginCapability_Service_CONTROLLER_SERVICE}}}}}
	})).AnyTimes()
	ids.EXPECT().Probe(a, a).DoAndReturn(do(inj, "Probe", func(*csi.ProbeRequest) *csi.ProbeResponse {
		return &csi.ProbeResponse{Ready: wrapperspb.Bool(true)}
	})).AnyTimes()
	cs.EXPECT().ControllerGetCapabilities(a, a).DoAndReturn(do(inj, "ControllerGetCapabilities", func(*csi.ControllerGetCapabilitiesRequest) *csi.ControllerGetCapabilitiesResponse {
		return &csi.ControllerGetCapabilitiesResponse{Capabilities: []*csi.ControllerServiceCapability{{Type: &csi.ControllerServiceCapability_Rpc{
			Rpc: &csi.ControllerServiceCapability_RPC{Type: csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME}}}}}
	})).AnyTimes()
	cs.EXPECT().ControllerPublishVolume(a, a).DoAndReturn(do(inj, "ControllerPublishVolume", func(*csi.ControllerPublishVolumeRequest) *csi.ControllerPublishVolumeResponse {
		return &csi.ControllerPublishVolumeResponse{PublishContext: map[string]string{"device": "/dev/mock"}}
	})).AnyTimes()
	cs.EXPECT().ControllerUnpublishVolume(a, a).DoAndReturn(do(inj, "ControllerUnpublishVolume", func(*csi.ControllerUnpublishVolumeRequest) *csi.ControllerUnpublishVolumeResponse {
		return &csi.ControllerUnpublishVolumeResponse{}
	})).AnyTimes()
	ns.EXPECT().NodeGetInfo(a, a).DoAndReturn(do(inj, "NodeGetInfo", func(*csi.NodeGetInfoRequest) *csi.NodeGetInfoResponse {
		return &csi.NodeGetInfoResponse{NodeId: nodeID}
	})).AnyTimes()
	ns.EXPECT().NodeGetCapabilities(a, a).DoAndReturn(do(inj, "NodeGetCapabilities", func(*csi.NodeGetCapabilitiesRequest) *csi.NodeGetCapabilitiesResponse {
		return &csi.NodeGetCapabilitiesResponse{Capabilities: []*csi.NodeServiceCapability{{Type: &csi.NodeServiceCapability_Rpc{
			Rpc: &csi.NodeServiceCapability_RPC{Type: csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME}}}}}
	})).AnyTimes()
	ns.EXPECT().NodeStageVolume(a, a).DoAndReturn(do(inj, "NodeStageVolume", func(*csi.NodeStageVolumeRequest) *csi.NodeStageVolumeResponse {
		return &csi.NodeStageVolumeResponse{}
	})).AnyTimes()
	ns.EXPECT().NodeUnstageVolume(a, a).DoAndReturn(do(inj, "NodeUnstageVolume", func(*csi.NodeUnstageVolumeRequest) *csi.NodeUnstageVolumeResponse {
		return &csi.NodeUnstageVolumeResponse{}
	})).AnyTimes()
	ns.EXPECT().NodePublishVolume(a, a).DoAndReturn(do(inj, "NodePublishVolume", func(*csi.NodePublishVolumeRequest) *csi.NodePublishVolumeResponse {
		return &csi.NodePublishVolumeResponse{}
	})).AnyTimes()
	ns.EXPECT().NodeUnpublishVolume(a, a).DoAndReturn(do(inj, "NodeUnpublishVolume", func(*csi.NodeUnpublishVolumeRequest) *csi.NodeUnpublishVolumeResponse {
		return &csi.NodeUnpublishVolumeResponse{}
	})).AnyTimes()
}
