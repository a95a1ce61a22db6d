// Package e2e owns the end-to-end harness: it builds and starts the real
// `volhost agent` and the driver programs of this module (cmd/gcepd,
// cmd/mockcsi) as processes, and talks to them only through the volhost CLI,
// the volhost HTTP API and the drivers' control sockets. The tests beside
// it (make e2e) and cmd/releasebench (make bench) use it.
package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/volhost/volhost/test/peers/internal/control"
	"github.com/volhost/volhost/test/peers/internal/fault"
)

// Bins are the programs the harness runs.
type Bins struct {
	Volhost, Gcepd, Mockcsi string
}

// BinDirEnv names a directory holding prebuilt volhost, gcepd and mockcsi
// binaries (make e2e builds them once); without it Build compiles them.
const BinDirEnv = "VOLHOST_E2E_BIN_DIR"

// Build returns the programs, from $VOLHOST_E2E_BIN_DIR when set, otherwise
// compiled into dir: volhost from the main module (found through this
// module's replace directive), the drivers from this one.
func Build(ctx context.Context, dir string) (Bins, error) {
	if d := os.Getenv(BinDirEnv); d != "" {
		b := Bins{Volhost: filepath.Join(d, "volhost"), Gcepd: filepath.Join(d, "gcepd"), Mockcsi: filepath.Join(d, "mockcsi")}
		for _, p := range []string{b.Volhost, b.Gcepd, b.Mockcsi} {
			if _, err := os.Stat(p); err != nil {
				return Bins{}, fmt.Errorf("%s=%s: %w", BinDirEnv, d, err)
			}
		}
		return b, nil
	}
	// The product module is two levels up; this module does not require it,
	// so none of the product's dependency versions mix with the driver's.
	root, err := productRoot(ctx)
	if err != nil {
		return Bins{}, err
	}
	peers := filepath.Join(root, "test", "peers")
	b := Bins{Volhost: filepath.Join(dir, "volhost"), Gcepd: filepath.Join(dir, "gcepd"), Mockcsi: filepath.Join(dir, "mockcsi")}
	if _, err := goOutput(ctx, root, "build", "-o", b.Volhost, "./cmd/volhost"); err != nil {
		return Bins{}, err
	}
	if _, err := goOutput(ctx, peers, "build", "-o", dir+"/", "./cmd/gcepd", "./cmd/mockcsi"); err != nil {
		return Bins{}, err
	}
	return b, nil
}

// runIn runs a program in dir and returns its combined output.
func runIn(ctx context.Context, dir, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

func goOutput(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	return strings.TrimSpace(string(out)), nil
}

// Proc is a started program whose output goes to a log file.
type Proc struct {
	Name string
	Log  string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// Start runs bin with args, logging to dir/name.log.
func Start(dir, name, bin string, args ...string) (*Proc, error) {
	logPath := filepath.Join(dir, name+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &Proc{Name: name, Log: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

// Exited is closed when the process has ended.
func (p *Proc) Exited() <-chan struct{} { return p.done }

// Stop asks the process to end (SIGTERM) and waits, killing it after grace.
func (p *Proc) Stop(grace time.Duration) {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		p.Kill()
	}
}

// Kill ends the process at once (SIGKILL), as a crash would, and waits.
func (p *Proc) Kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// Tail returns the last n bytes of the process log, for failure messages.
func (p *Proc) Tail(n int64) string {
	f, err := os.Open(p.Log)
	if err != nil {
		return ""
	}
	defer f.Close()
	st, _ := f.Stat()
	if st != nil && st.Size() > n {
		_, _ = f.Seek(-n, io.SeekEnd)
	}
	b, _ := io.ReadAll(f)
	return string(b)
}

// FreeAddr returns a loopback address with a port that was free a moment ago.
func FreeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// addrReservation holds loopback ports open until release: addresses
// picked for processes that bind them later must all be picked before any
// of those processes starts, and while the others are held, or a port one
// process has not bound yet is handed out again (TestChaosFailover hung
// once: s3's raft took the port chosen for s2's HTTP API, s2 exited, and
// the two left waited for a third).
type addrReservation struct{ ls []net.Listener }

// next reserves one more distinct port and returns its address.
func (r *addrReservation) next() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	r.ls = append(r.ls, l)
	return l.Addr().String(), nil
}

// release frees every reserved port for the processes to bind.
func (r *addrReservation) release() {
	for _, l := range r.ls {
		l.Close()
	}
	r.ls = nil
}

// Agent is a running `volhost agent -dev`.
type Agent struct {
	*Proc
	Addr string // http://host:port
	API  *API
	bin  string
}

// StartAgent writes config (the HCL body of the agent file) and starts a
// dev agent on a free port, returning once it leads.
func StartAgent(ctx context.Context, dir, bin, config string, extraArgs ...string) (*Agent, error) {
	addr, err := FreeAddr()
	if err != nil {
		return nil, err
	}
	cfgPath := filepath.Join(dir, "agent.hcl")
	if err := os.WriteFile(cfgPath, []byte(config), 0o600); err != nil {
		return nil, err
	}
	args := append([]string{"agent", "-dev", "-http-addr", addr, "-config", cfgPath}, extraArgs...)
	p, err := Start(dir, "agent", bin, args...)
	if err != nil {
		return nil, err
	}
	a := &Agent{Proc: p, Addr: "http://" + addr, bin: bin}
	a.API = NewAPI(a.Addr)
	err = Poll(ctx, 20*time.Millisecond, func() (bool, error) {
		select {
		case <-p.Exited():
			return false, fmt.Errorf("agent exited: %v\n%s", p.err, p.Tail(4000))
		default:
		}
		l, err := a.API.Leader(ctx)
		return err == nil && l, nil
	})
	if err != nil {
		p.Kill()
		return nil, fmt.Errorf("waiting for the agent to lead: %w", err)
	}
	if slices.Contains(extraArgs, "-module-dir") {
		// The agent listens first and compiles its modules after: a
		// scenario starts once none is loading.
		err = Poll(ctx, 20*time.Millisecond, func() (bool, error) {
			n, err := a.API.ModulesLoading(ctx)
			return err == nil && n == 0, err
		})
		if err != nil {
			p.Kill()
			return nil, fmt.Errorf("waiting for the agent's modules to load: %w", err)
		}
	}
	return a, nil
}

// CLI runs the volhost CLI against the agent and returns its combined
// output and exit code.
func (a *Agent) CLI(ctx context.Context, args ...string) (string, int, error) {
	return runCLI(ctx, a.bin, a.Addr, args...)
}

// runCLI runs the volhost CLI bin against the server at addr and returns
// its combined output and exit code (an error only when it did not run).
func runCLI(ctx context.Context, bin, addr string, args ...string) (string, int, error) {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "VOLHOST_ADDR="+addr)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(out), ee.ExitCode(), nil
	}
	if err != nil {
		return string(out), -1, err
	}
	return string(out), 0, nil
}

// Poll calls cond every interval until it reports true, returns an error, or
// ctx ends (the deadline of every wait in these tests: no sleeps).
func Poll(ctx context.Context, interval time.Duration, cond func() (bool, error)) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// Control is a client for a driver program's control socket.
type Control struct {
	hc *http.Client
}

// NewControl returns a client for the control socket at sock.
func NewControl(sock string) *Control {
	return &Control{hc: &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
	}}}
}

func (c *Control) do(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://driver"+path, rd)
	if err != nil {
		return err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, strings.TrimSpace(string(b)))
	}
	if out != nil {
		return json.NewDecoder(resp.Body).Decode(out)
	}
	return nil
}

// Ready reports whether the control socket answers.
func (c *Control) Ready(ctx context.Context) bool {
	_, err := c.Calls(ctx)
	return err == nil
}

// Fault arms a gRPC fault rule.
func (c *Control) Fault(ctx context.Context, r fault.Rule) error {
	return c.do(ctx, http.MethodPost, "/fault", control.FaultRequest{Rule: r}, nil)
}

// DetachErrors makes the fake cloud fail the next n detaches (-1: all; 0: none).
func (c *Control) DetachErrors(ctx context.Context, n int) error {
	return c.do(ctx, http.MethodPost, "/fault", control.FaultRequest{DetachErrors: &n}, nil)
}

// ClearFaults disarms every rule and detach error.
func (c *Control) ClearFaults(ctx context.Context) error {
	return c.do(ctx, http.MethodDelete, "/fault", nil, nil)
}

// Calls returns the driver's recorded calls.
func (c *Control) Calls(ctx context.Context) (control.CallsResponse, error) {
	var r control.CallsResponse
	err := c.do(ctx, http.MethodGet, "/calls", nil, &r)
	return r, err
}

// ResetCalls forgets the recorded calls.
func (c *Control) ResetCalls(ctx context.Context) error {
	return c.do(ctx, http.MethodDelete, "/calls", nil, nil)
}

// Attached asks the fake cloud whether disk is attached to instance.
func (c *Control) Attached(ctx context.Context, disk, instance string) (bool, error) {
	var r struct {
		Attached bool `json:"attached"`
	}
	q := url.Values{"disk": {disk}, "node": {instance}}
	err := c.do(ctx, http.MethodGet, "/attached?"+q.Encode(), nil, &r)
	return r.Attached, err
}

// GCEPD is a running cmd/gcepd with a controller socket, one node socket per
// instance and a control socket.
type GCEPD struct {
	*Proc
	Project, Zone string
	Controller    string            // unix socket path
	Nodes         map[string]string // instance name -> node socket path
	Control       *Control
	ControlSock   string
	args          []string
	dir, bin      string
	mu            sync.Mutex
}

// GCEPDOptions configures StartGCEPD.
type GCEPDOptions struct {
	Nodes []string // instance names, each served as a node
	Disks int      // disks disk-0 .. disk-N-1
	// BackoffInitial is the driver's own error backoff (default 200ms in
	// the driver's tests; small here so retries are not held back long).
	BackoffInitial, BackoffMax time.Duration
	Verbosity                  string
}

// StartGCEPD starts the GCE PD driver with sockets under sockDir (keep it
// short: unix socket paths are limited to about 100 bytes) and logs in logDir.
func StartGCEPD(ctx context.Context, sockDir, logDir, bin string, o GCEPDOptions) (*GCEPD, error) {
	g := &GCEPD{
		Project: "test-project", Zone: "us-central1-a",
		Controller: filepath.Join(sockDir, "c.sock"), ControlSock: filepath.Join(sockDir, "ctl.sock"),
		Nodes: map[string]string{}, dir: logDir, bin: bin,
	}
	args := []string{"-project", g.Project, "-zone", g.Zone, "-controller", g.Controller, "-control", g.ControlSock,
		"-state", filepath.Join(logDir, "gcepd-state.json"), "-disks", fmt.Sprint(o.Disks)}
	for _, n := range o.Nodes {
		g.Nodes[n] = filepath.Join(sockDir, n+".sock")
		args = append(args, "-node", n+"="+g.Nodes[n])
	}
	if o.BackoffInitial > 0 {
		args = append(args, "-backoff-initial", o.BackoffInitial.String())
	}
	if o.BackoffMax > 0 {
		args = append(args, "-backoff-max", o.BackoffMax.String())
	}
	if o.Verbosity != "" {
		args = append(args, "-v", o.Verbosity)
	}
	g.args = args
	g.Control = NewControl(g.ControlSock)
	if err := g.start(ctx); err != nil {
		return nil, err
	}
	return g, nil
}

func (g *GCEPD) start(ctx context.Context, extra ...string) error {
	p, err := Start(g.dir, "gcepd", g.bin, append(slices.Clone(g.args), extra...)...)
	if err != nil {
		return err
	}
	g.mu.Lock()
	g.Proc = p
	g.mu.Unlock()
	err = Poll(ctx, 10*time.Millisecond, func() (bool, error) {
		select {
		case <-p.Exited():
			return false, fmt.Errorf("gcepd exited:\n%s", p.Tail(4000))
		default:
		}
		return g.Control.Ready(ctx), nil
	})
	if err != nil {
		p.Kill()
		return fmt.Errorf("waiting for gcepd: %w", err)
	}
	return nil
}

// Restart starts the driver again with the same flags (and state file),
// after a Kill or Stop, with rules armed before it serves its first call: a
// caller retrying against the restarted driver would race a rule armed
// through Control afterwards.
func (g *GCEPD) Restart(ctx context.Context, rules ...fault.Rule) error {
	var extra []string
	for _, r := range rules {
		b, err := json.Marshal(r)
		if err != nil {
			return err
		}
		extra = append(extra, "-fault", string(b))
	}
	return g.start(ctx, extra...)
}

// NodeID is the external node ID the driver reports for an instance.
func (g *GCEPD) NodeID(instance string) string {
	return fmt.Sprintf("projects/%s/zones/%s/instances/%s", g.Project, g.Zone, instance)
}

// VolumeID is the CSI volume ID of a disk.
func (g *GCEPD) VolumeID(disk string) string {
	return fmt.Sprintf("projects/%s/zones/%s/disks/%s", g.Project, g.Zone, disk)
}

// Endpoint is the unix:// form of a socket path.
func Endpoint(sock string) string { return "unix://" + sock }
