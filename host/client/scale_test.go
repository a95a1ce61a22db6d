package client_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/hashicorp/go-hclog"

	"github.com/volhost/volhost/host/client"
	"github.com/volhost/volhost/host/csi"
	"github.com/volhost/volhost/host/csi/csitest"
	"github.com/volhost/volhost/host/nodeconn"
	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/internal/testutil"
)

// The node agents' scale measurement (BENCHMARKS.md "Node agents"): the
// leader runs in a child process (so its CPU and memory are its own), the
// simulated agents in this one, all against one scripted plugin socket.
// Opt-in: VOLHOST_SCALE_AGENTS=1000 go test -run TestScaleAgents -v ./host/client/
const (
	scaleAgentsEnv = "VOLHOST_SCALE_AGENTS"
	scaleLeaderEnv = "VOLHOST_SCALE_LEADER" // set in the child: the plugin endpoint
	scaleRootEnv   = "VOLHOST_SCALE_ROOT"   // the agents' root_dir
	scaleRounds    = 5
	scaleWindow    = 10 * time.Second // one heartbeat interval per CPU window
	scaleCalls     = 200              // node steps per round and mode
)

type scaleResult struct {
	Agents     int       `json:"agents"`
	CPUPercent []float64 `json:"cpu_percent"` // per window, of one core
	HeapMiB    float64   `json:"heap_mib"`
	RSSMiB     float64   `json:"rss_mib"`
	Goroutines int       `json:"goroutines"`
	AgentP50   []float64 `json:"agent_p50_ms"`
	AgentP99   []float64 `json:"agent_p99_ms"`
	DirectP50  []float64 `json:"direct_p50_ms"`
	DirectP99  []float64 `json:"direct_p99_ms"`
}

func TestScaleAgents(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv(scaleAgentsEnv))
	if n == 0 {
		t.Skip("set " + scaleAgentsEnv + "=1000 to run the node agent scale measurement")
	}
	plugin := csitest.NewServer(t, csitest.Options{NodeID: "sim", StageUnstage: true})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	root := t.TempDir()
	child := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestScaleLeaderProcess$", "-test.v")
	child.Env = append(os.Environ(), scaleLeaderEnv+"="+plugin.Endpoint(), scaleAgentsEnv+"="+strconv.Itoa(n), scaleRootEnv+"="+root)
	child.Stderr = os.Stderr
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer child.Wait()
	lines := bufio.NewScanner(out)
	addr := ""
	for addr == "" && lines.Scan() {
		if a, ok := strings.CutPrefix(lines.Text(), "ADDR "); ok {
			addr = a
		}
	}
	if addr == "" {
		t.Fatal("the leader process did not start")
	}
	actx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }()
	for i := range n {
		a, err := client.New(client.Config{Servers: []string{addr}, NodeID: fmt.Sprintf("sim-%04d", i), RootDir: root,
			Plugins: map[string]string{"p": plugin.Endpoint()}, Logger: hclog.NewNullLogger()})
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() { defer wg.Done(); _ = a.Run(actx) }()
	}
	for lines.Scan() {
		if r, ok := strings.CutPrefix(lines.Text(), "RESULT "); ok {
			var res scaleResult
			if err := json.Unmarshal([]byte(r), &res); err != nil {
				t.Fatal(err)
			}
			t.Logf("RESULT %s", r)
			return
		}
	}
	t.Fatal("the leader process ended without a result")
}

type nopRegistrar struct{}

func (nopRegistrar) RegisterAgentNode(_ context.Context, n *structs.Node) (*structs.Node, error) {
	return n, nil
}

// simNodes answers the tracker: every simulated node is a ready agent node.
type simNodes struct{ nodes []*structs.Node }

func (s simNodes) Nodes() ([]*structs.Node, error)                                { return s.nodes, nil }
func (s simNodes) Node(string) (*structs.Node, error)                             { return nil, nil }
func (simNodes) NodeLiveness(context.Context, *structs.NodeLivenessRequest) error { return nil }

// TestScaleLeaderProcess is the leader side, run only as the child.
func TestScaleLeaderProcess(t *testing.T) {
	endpoint := os.Getenv(scaleLeaderEnv)
	if endpoint == "" {
		t.Skip("the leader process of TestScaleAgents")
	}
	n, _ := strconv.Atoi(os.Getenv(scaleAgentsEnv))
	sim := simNodes{}
	for i := range n {
		sim.nodes = append(sim.nodes, &structs.Node{ID: fmt.Sprintf("sim-%04d", i), Status: structs.NodeReady, Agent: true})
	}
	tr := nodeconn.NewTracker(nodeconn.TrackerConfig{TTL: 30 * time.Second}, sim, sim)
	tr.Enable(1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go tr.Run(ctx)
	s := nodeconn.NewServer(nodeconn.Config{Registrar: nopRegistrar{}, Leader: leader(true), Tracker: tr,
		HeartbeatInterval: nodeconn.DefaultHeartbeatInterval})
	if err := s.Listen("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.Serve() }()
	defer s.Stop()
	fmt.Println("ADDR " + s.Addr())
	for len(s.Connected()) < n {
		<-time.After(50 * time.Millisecond) // measurement setup, not a test assertion
	}
	res := scaleResult{Agents: n}
	for range scaleRounds {
		before := cpuTime()
		start := time.Now()
		<-time.After(scaleWindow)
		res.CPUPercent = append(res.CPUPercent, 100*float64(cpuTime()-before)/float64(time.Since(start)))
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	res.HeapMiB, res.RSSMiB, res.Goroutines = float64(ms.HeapInuse)/(1<<20), testutil.RSSMiB(), runtime.NumGoroutine()

	direct := csi.New(csi.Config{})
	defer direct.Close()
	agent := s.Agent("sim-0000")
	req := &csipb.NodeUnpublishVolumeRequest{VolumeId: "v", TargetPath: "/x"}
	_ = direct.NodeUnpublishVolume(ctx, endpoint, req) // dial once
	time1 := func(call func() error) float64 {
		st := time.Now()
		if err := call(); err != nil {
			t.Fatal(err)
		}
		return float64(time.Since(st).Microseconds()) / 1000
	}
	// The agent refuses paths outside its root_dir before any call.
	_, agentPath := csi.Paths(os.Getenv(scaleRootEnv), "p", "default", "v", "a")
	for range scaleRounds {
		var a, d []float64
		for range scaleCalls {
			a = append(a, time1(func() error {
				return agent.NodeUnpublishVolume(ctx, endpoint, &csipb.NodeUnpublishVolumeRequest{VolumeId: "v", TargetPath: agentPath})
			}))
			d = append(d, time1(func() error { return direct.NodeUnpublishVolume(ctx, endpoint, req) }))
		}
		res.AgentP50, res.AgentP99 = append(res.AgentP50, pct(a, 50)), append(res.AgentP99, pct(a, 99))
		res.DirectP50, res.DirectP99 = append(res.DirectP50, pct(d, 50)), append(res.DirectP99, pct(d, 99))
	}
	b, _ := json.Marshal(res)
	fmt.Println("RESULT " + string(b))
}

func pct(v []float64, p int) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)]
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
