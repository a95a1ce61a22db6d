// Command gcepd serves the real GCE persistent-disk CSI driver
// (sigs.k8s.io/gcp-compute-persistent-disk-csi-driver v1.28.1) on unix
// sockets, in one process and without root: the controller service over the
// driver's fake cloud (gce.CreateFakeCloudProvider), and one node service per
// -node flag with the driver's fake mounter, device utils and a per-node
// metadata service, so NodeGetInfo reports projects/P/zones/Z/instances/N.
//
// Faults are set at run time through the control socket (-control), an HTTP
// server on a unix socket:
//
//	POST /fault      {"method":"ControllerUnpublishVolume","code":"Unavailable","count":2,"hang":"5s"}
//	POST /fault      {"detach_errors":-1}   fail detaches in the fake cloud (-1: all, N: the next N, 0: none)
//	DELETE /fault    clear every rule and armed detach error, and end every hang in progress
//	GET /calls       {"calls":[...finished, in completion order], "started":[...in arrival order]}
//	DELETE /calls    forget the recorded calls
//	GET /attached?disk=D&node=N   {"attached":true|false} from the fake cloud
//
// With -state, attachments survive a kill and restart of the process.
// -fault arms a rule (the JSON of POST /fault) before the first call is
// served, so a restarted driver can hold a method from its first request:
// a rule armed over the control socket after start-up races the caller's
// retry.
package main

import (
	"context"
	"encoding/json"
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
	"google.golang.org/grpc"
	"k8s.io/klog/v2"
	"k8s.io/mount-utils"
	testingexec "k8s.io/utils/exec/testing"
	"sigs.k8s.io/gcp-compute-persistent-disk-csi-driver/pkg/deviceutils"
	driver "sigs.k8s.io/gcp-compute-persistent-disk-csi-driver/pkg/gce-pd-csi-driver"
	mountmanager "sigs.k8s.io/gcp-compute-persistent-disk-csi-driver/pkg/mount-manager"

	"github.com/volhost/volhost/test/peers/internal/control"
	"github.com/volhost/volhost/test/peers/internal/fault"
)

// DriverName is the CSI plugin name the driver reports.
const DriverName = "pd.csi.storage.gke.io"

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "gcepd:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		project                         = flag.String("project", "test-project", "GCE project of the fake cloud")
		zone                            = flag.String("zone", "us-central1-a", "zone of every instance and disk")
		controller                      = flag.String("controller", "", "unix socket path for the controller (and identity) service; empty: none")
		controlSock                     = flag.String("control", "", "unix socket path for the HTTP control endpoint; empty: none")
		stateFile                       = flag.String("state", "", "file that keeps fake-cloud attachments across restarts")
		ndisks                          = flag.Int("disks", 0, "create N disks named disk-0 .. disk-N-1")
		backoffMin                      = flag.Duration("backoff-initial", 200*time.Millisecond, "the driver's own error backoff, first step")
		backoffMax                      = flag.Duration("backoff-max", 5*time.Second, "the driver's own error backoff, ceiling")
		verbosity                       = flag.String("v", "0", "klog verbosity of the driver")
		nodes, instances, disks, faults listFlag
	)
	flag.Var(&nodes, "node", "NAME=SOCKET: serve a node service for instance NAME on SOCKET (repeatable)")
	flag.Var(&instances, "instance", "create instance NAME in the fake cloud (repeatable; -node names are created too)")
	flag.Var(&disks, "disk", "create disk NAME in the fake cloud (repeatable)")
	flag.Var(&faults, "fault", `arm a fault rule before serving, as JSON: {"method":"ControllerUnpublishVolume","hang":"10m"} (repeatable)`)
	flag.Parse()

	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	_ = klogFlags.Set("v", *verbosity)
	_ = klogFlags.Set("logtostderr", "true")

	if *controller == "" && len(nodes) == 0 {
		return errors.New("nothing to serve: set -controller and/or -node")
	}
	type nodeSock struct{ name, sock string }
	var ns []nodeSock
	for _, n := range nodes {
		name, sock, ok := strings.Cut(n, "=")
		if !ok || name == "" || sock == "" {
			return fmt.Errorf("-node %q: want NAME=SOCKET", n)
		}
		ns = append(ns, nodeSock{name, sock})
		instances = append(instances, name)
	}
	for i := 0; i < *ndisks; i++ {
		disks = append(disks, fmt.Sprintf("disk-%d", i))
	}

	cloud, err := newLockedCloud(*project, *zone, disks, instances, *stateFile)
	if err != nil {
		return err
	}
	inj := fault.New()
	for _, f := range faults {
		var r fault.Rule
		if err := json.Unmarshal([]byte(f), &r); err != nil {
			return fmt.Errorf("-fault %s: %w", f, err)
		}
		if err := inj.Arm(r); err != nil {
			return fmt.Errorf("-fault %s: %w", f, err)
		}
	}

	gd := driver.GetGCEDriver()
	ids := driver.NewIdentityServer(gd)
	var cs *driver.GCEControllerServer
	if *controller != "" {
		cs = driver.NewControllerServer(gd, cloud, *backoffMin, *backoffMax, nil, false, false,
			driver.MultiZoneVolumeHandleConfig{}, driver.ListVolumesConfig{}, driver.ProvisionableDisksConfig{},
			false, &driver.GCEControllerServerArgs{})
	}
	if err := gd.SetupGCEDriver(DriverName, "volhost-peers", nil, nil, ids, cs, nil); err != nil {
		return fmt.Errorf("driver setup: %w", err)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	var servers []*grpc.Server
	serve := func(sock, service string, register func(*grpc.Server)) error {
		_ = os.Remove(sock)
		l, err := net.Listen("unix", sock)
		if err != nil {
			return fmt.Errorf("listen %s: %w", sock, err)
		}
		s := grpc.NewServer(grpc.UnaryInterceptor(inj.Interceptor(service)))
		csi.RegisterIdentityServer(s, ids)
		register(s)
		servers = append(servers, s)
		go func() { _ = s.Serve(l) }()
		return nil
	}
	if cs != nil {
		if err := serve(*controller, "controller", func(s *grpc.Server) { csi.RegisterControllerServer(s, cs) }); err != nil {
			return err
		}
	}
	for _, n := range ns {
		mounter := mountmanager.NewCustomFakeSafeMounter(&mount.FakeMounter{}, &testingexec.FakeExec{DisableScripts: true})
		// Fake device utils with resize skipped: there is no block device to
		// measure. The node steps still run the driver's own logic (device
		// lookup, format-and-mount decisions, mount bookkeeping).
		node := driver.NewNodeServer(gd, mounter, deviceutils.NewFakeDeviceUtils(true),
			&metadata{project: *project, zone: *zone, name: n.name}, mountmanager.NewFakeStatter(mounter),
			&driver.NodeServerArgs{})
		if err := serve(n.sock, n.name, func(s *grpc.Server) { csi.RegisterNodeServer(s, node) }); err != nil {
			return err
		}
	}
	var ctl *http.Server
	if *controlSock != "" {
		_ = os.Remove(*controlSock)
		l, err := net.Listen("unix", *controlSock)
		if err != nil {
			return fmt.Errorf("listen %s: %w", *controlSock, err)
		}
		ctl = &http.Server{Handler: control.Handler(inj, &attachments{cloud}), ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = ctl.Serve(l) }()
	}
	fmt.Fprintf(os.Stderr, "gcepd: serving (controller=%q nodes=%d disks=%d)\n", *controller, len(ns), len(disks))
	<-ctx.Done()
	for _, s := range servers {
		s.Stop()
	}
	if ctl != nil {
		_ = ctl.Close()
	}
	return nil
}

// metadata is one node's GCE metadata service: the driver's fake keeps
// package globals, which would give every node in the process one name.
type metadata struct{ project, zone, name string }

func (m *metadata) GetZone() string        { return m.zone }
func (m *metadata) GetProject() string     { return m.project }
func (m *metadata) GetName() string        { return m.name }
func (m *metadata) GetMachineType() string { return "n1-standard-4" }
func (m *metadata) GetValue(_ context.Context, name string) (string, error) {
	return "", fmt.Errorf("metadata %q not served by gcepd", name)
}

// attachments adapts the cloud to the control endpoint.
type attachments struct{ c *lockedCloud }

func (a *attachments) Attached(ctx context.Context, disk, node string) (bool, error) {
	return a.c.isAttached(ctx, disk, node)
}
func (a *attachments) ArmDetachErrors(n int) { a.c.armDetachErrors(n) }
