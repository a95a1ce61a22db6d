package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The real Nomad agent the Nomad bridge's scenarios run against. Nomad is
// BUSL-1.1: it is built locally by `make nomad` (scripts/build-nomad.sh)
// into a cache outside the repository, never committed or vendored.

// NomadBinEnv names the Nomad binary; without it the harness looks in
// $HOME/.cache/volhost/nomad-v1.11.3/nomad, where `make nomad` puts it.
const NomadBinEnv = "VOLHOST_E2E_NOMAD"

// NomadVersion is the Nomad release the scenarios are written against.
const NomadVersion = "v1.11.3"

// NomadBin returns the Nomad binary, or an error saying how to build it.
func NomadBin() (string, error) {
	p := os.Getenv(NomadBinEnv)
	if p == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", err
		}
		p = filepath.Join(home, ".cache", "volhost", "nomad-"+NomadVersion, "nomad")
	}
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("no Nomad binary at %s (run `make nomad`, or set %s): %w", p, NomadBinEnv, err)
	}
	return p, nil
}

// Nomad is a running `nomad agent -dev` (server and client in one) on
// loopback ports.
type Nomad struct {
	Addr     string // http://127.0.0.1:PORT
	RPC      string // 127.0.0.1:PORT, where clients join a server
	Name     string // the client node's name
	DataDir  string
	bin, dir string
	cmd      *exec.Cmd
	args     []string
	api      *Nomad // the server whose API lists this agent's node (itself for a dev agent)
	log      string
	done     chan struct{}
}

// NomadOptions are a test's choices for a Nomad dev agent.
type NomadOptions struct {
	// FastNodeLoss makes a silent client down within seconds (heartbeat
	// TTL and grace of 1 s: Nomad's default grace kept a killed client up
	// for 22 s) and lets `nomad system gc` collect a node down for a
	// second. Only for the tests of lost nodes: on a loaded machine (a
	// load average of 17 on 2 cores) the dev agent's own client missed
	// the 1 s grace, and Nomad replaced its allocation under a test of
	// something else.
	FastNodeLoss bool
}

// StartNomad starts a dev agent whose client node is called name, with
// raw_exec enabled, the update check off, the cloud fingerprinters denied
// (they probe metadata endpoints for seconds) and AWS_CA_BUNDLE unset (the
// agent dies at start when it names a missing file). It returns once the
// node is ready. Without o.FastNodeLoss a client is marked down only after
// 30 s without a heartbeat past its TTL: a slow machine never loses one.
func StartNomad(ctx context.Context, dir, bin, name string, o NomadOptions) (*Nomad, error) {
	grace, server := 30*time.Second, `
server {
  heartbeat_grace = "30s"
}
`
	if o.FastNodeLoss {
		grace, server = time.Second, `
server {
  heartbeat_grace   = "1s"
  min_heartbeat_ttl = "1s"
  node_gc_threshold = "1s"
}
`
	}
	n, err := startNomad(ctx, dir, bin, name, nil, "", server)
	if err != nil {
		return nil, err
	}
	// The server runs with the grace asked for: a setting it ignored
	// shows up only as a test that fails under load.
	var self struct {
		Config struct {
			Server struct{ HeartbeatGrace time.Duration }
		}
	}
	if err := n.Get(ctx, "/v1/agent/self", &self); err != nil {
		n.Stop()
		return nil, err
	}
	if got := self.Config.Server.HeartbeatGrace; got != grace {
		n.Stop()
		return nil, fmt.Errorf("nomad runs with heartbeat_grace %s, want %s", got, grace)
	}
	return n, nil
}

// StartClient starts a client-only agent (node name) joined to n's
// server: a second node that a test can lose.
func (n *Nomad) StartClient(ctx context.Context, name string) (*Nomad, error) {
	return startNomad(ctx, n.dir, n.bin, name, n, fmt.Sprintf("  enabled = true\n  servers = [%q]\n", n.RPC))
}

// startNomad starts a dev agent (server nil) or a client of server;
// clientExtra goes inside the client block, extra after the rest.
func startNomad(ctx context.Context, dir, bin, name string, server *Nomad, clientExtra string, extra ...string) (*Nomad, error) {
	var ports [3]int
	for i := range ports {
		addr, err := FreeAddr()
		if err != nil {
			return nil, err
		}
		_, p, _ := net.SplitHostPort(addr)
		ports[i], _ = strconv.Atoi(p)
	}
	n := &Nomad{Addr: fmt.Sprintf("http://127.0.0.1:%d", ports[0]), RPC: fmt.Sprintf("127.0.0.1:%d", ports[1]), Name: name, DataDir: filepath.Join(dir, "nomad-"+name),
		bin: bin, dir: dir, log: filepath.Join(dir, "nomad-"+name+".log"), done: make(chan struct{})}
	cfg := fmt.Sprintf(`
name                 = %q
data_dir             = %q
bind_addr            = "127.0.0.1"
disable_update_check = true
advertise {
  http = "127.0.0.1"
  rpc  = "127.0.0.1"
  serf = "127.0.0.1"
}
log_level            = "DEBUG"
ports {
  http = %d
  rpc  = %d
  serf = %d
}
client {
%s  network_interface = "lo"
  options {
    "fingerprint.denylist" = "env_aws,env_gce,env_azure,env_digitalocean"
  }
}
plugin "raw_exec" {
  config {
    enabled = true
  }
}
`, name, n.DataDir, ports[0], ports[1], ports[2], clientExtra) + strings.Join(extra, "")
	cfgPath := filepath.Join(dir, "nomad-"+name+".hcl")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	args := []string{"agent", "-dev", "-config", cfgPath}
	api := n
	if server != nil {
		args, api = []string{"agent", "-config", cfgPath}, server
	}
	n.args, n.api = args, api
	if err := n.start(args); err != nil {
		return nil, err
	}
	if err := n.waitReady(ctx); err != nil {
		n.Stop()
		return nil, err
	}
	return n, nil
}

// Restart starts the agent again with the same configuration (ports,
// data_dir) after a Stop or Kill; a dev agent comes back with an empty
// state (its server keeps nothing).
func (n *Nomad) Restart(ctx context.Context) error {
	n.done = make(chan struct{})
	if err := n.start(n.args); err != nil {
		return err
	}
	return n.waitReady(ctx)
}

// waitReady waits until the agent's node is ready.
func (n *Nomad) waitReady(ctx context.Context) error {
	name, api := n.Name, n.api
	err := Poll(ctx, 100*time.Millisecond, func() (bool, error) {
		select {
		case <-n.done:
			return false, fmt.Errorf("nomad exited:\n%s", n.Tail(4000))
		default:
		}
		var nodes []struct{ Name, Status string }
		if err := api.Get(ctx, "/v1/nodes", &nodes); err != nil {
			return false, nil
		}
		for _, nd := range nodes {
			if nd.Name == name && nd.Status == "ready" {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for Nomad node %s: %w", name, err)
	}
	return nil
}

func (n *Nomad) start(args []string) error {
	f, err := os.OpenFile(n.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	cmd := exec.Command(n.bin, args...)
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "AWS_CA_BUNDLE=") && !strings.HasPrefix(kv, "NOMAD_") {
			env = append(env, kv)
		}
	}
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("starting nomad: %w", err)
	}
	n.cmd = cmd
	go func() {
		_ = cmd.Wait()
		f.Close()
		close(n.done)
	}()
	return nil
}

// Stop ends the agent and everything it left behind: a Nomad client
// leaves its tasks, executors and logmon running when it dies (seen with
// Nomad v1.11.3),
// so every process whose command line names its data directory goes
// too, by process ID (the tasks name their volume's path, under the
// volhost node's root_dir: the test kills those by that directory).
func (n *Nomad) Stop() {
	if n.cmd != nil && n.cmd.Process != nil {
		_ = n.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-n.done:
		case <-time.After(10 * time.Second):
			_ = n.cmd.Process.Kill()
			<-n.done
		}
	}
	if n.cmd != nil && n.cmd.Process != nil {
		// Its plugins (logmon) stay in its process group.
		_ = syscall.Kill(-n.cmd.Process.Pid, syscall.SIGKILL)
	}
	KillByDir(n.DataDir)
	UnmountUnder(n.DataDir)
}

// UnmountUnder detaches every mount under dir: a Nomad client mounts a
// tmpfs for each task's secrets and leaves them when it is killed.
func UnmountUnder(dir string) {
	b, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return
	}
	var points []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 1 && strings.HasPrefix(f[1], dir+"/") {
			points = append(points, f[1])
		}
	}
	// Deepest first.
	for i := len(points) - 1; i >= 0; i-- {
		_ = syscall.Unmount(points[i], syscall.MNT_DETACH)
	}
}

// Kill ends the agent at once (SIGKILL), as a crash would; its tasks keep
// running.
func (n *Nomad) Kill() {
	_ = n.cmd.Process.Kill()
	<-n.done
}

// Pause stops the agent's process (SIGSTOP) without its tasks, as a
// network partition looks to its server: no heartbeat, tasks running.
func (n *Nomad) Pause() { _ = n.cmd.Process.Signal(syscall.SIGSTOP) }

// Resume continues a paused agent (SIGCONT): the partition heals.
func (n *Nomad) Resume() { _ = n.cmd.Process.Signal(syscall.SIGCONT) }

// WaitReady waits until Nomad reports the agent's node ready.
func (n *Nomad) WaitReady(ctx context.Context) error { return n.waitReady(ctx) }

// KillByDir kills (SIGKILL) every process whose command line contains dir:
// the tasks, executors and logmon a Nomad client left behind.
func KillByDir(dir string) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return
	}
	self := os.Getpid()
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		if strings.Contains(string(cmdline), dir) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// Tail returns the last n bytes of the agent's log.
func (n *Nomad) Tail(max int64) string {
	f, err := os.Open(n.log)
	if err != nil {
		return ""
	}
	defer f.Close()
	if st, _ := f.Stat(); st != nil && st.Size() > max {
		_, _ = f.Seek(-max, io.SeekEnd)
	}
	b, _ := io.ReadAll(f)
	return string(b)
}

// Get reads a Nomad API path into out.
func (n *Nomad) Get(ctx context.Context, path string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, n.Addr+path, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %d %s", path, resp.StatusCode, body)
	}
	return json.Unmarshal(body, out)
}

// CLI runs the nomad CLI against the agent.
func (n *Nomad) CLI(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, n.bin, args...)
	cmd.Env = append(os.Environ(), "NOMAD_ADDR="+n.Addr)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("nomad %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// NomadAlloc is what the scenarios read of an allocation.
type NomadAlloc struct {
	ID            string
	NodeName      string
	ClientStatus  string
	DesiredStatus string
	// ModifyTime is when the server applied the allocation's last update
	// (Unix nanoseconds): for a terminal allocation, when the client's
	// terminal status reached the server.
	ModifyTime int64
	TaskStates map[string]struct {
		State      string
		FinishedAt time.Time
	}
}

// JobAllocs lists a job's allocations.
func (n *Nomad) JobAllocs(ctx context.Context, job string) ([]NomadAlloc, error) {
	var out []NomadAlloc
	err := n.Get(ctx, "/v1/job/"+job+"/allocations", &out)
	return out, err
}

// Alloc reads one allocation.
func (n *Nomad) Alloc(ctx context.Context, id string) (NomadAlloc, error) {
	var out NomadAlloc
	err := n.Get(ctx, "/v1/allocation/"+id, &out)
	return out, err
}

// WaitAlloc polls a job until it has an allocation other than those in
// skip, and returns it.
func (n *Nomad) WaitAlloc(ctx context.Context, job string, skip map[string]bool) (NomadAlloc, error) {
	var got NomadAlloc
	err := Poll(ctx, 50*time.Millisecond, func() (bool, error) {
		as, err := n.JobAllocs(ctx, job)
		if err != nil {
			return false, nil
		}
		for _, a := range as {
			if !skip[a.ID] {
				got = a
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return got, fmt.Errorf("waiting for an allocation of job %s: %w", job, err)
	}
	return got, nil
}

// Terminal reports whether the client reported the allocation ended.
func (a NomadAlloc) Terminal() bool {
	return a.ClientStatus == "complete" || a.ClientStatus == "failed" || a.ClientStatus == "lost"
}
