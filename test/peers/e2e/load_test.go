package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// loadReport is what BENCHMARKS.md shows for the HTTP surface under load.
type loadReport struct {
	IdleConns       int    `json:"idle_keepalive_connections"`
	MaxConns        int    `json:"agent_max_conns"`
	HeldByAgent     int    `json:"connections_the_agent_kept_open"`
	IdleRefused     int    `json:"idle_connections_refused"`
	LongPolls       int    `json:"long_polls"`
	ObjectBytes     int    `json:"long_polled_object_bytes"`
	HealthChecks    int    `json:"health_checks"`
	HealthFailed    int    `json:"health_checks_failed"`
	HealthMaxMillis int64  `json:"health_check_max_ms"`
	RSSBeforeMiB    int    `json:"agent_rss_before_mib"`
	RSSLoadedMiB    int    `json:"agent_rss_loaded_mib"`
	RSSBoundMiB     int    `json:"agent_rss_bound_mib"`
	Duration        string `json:"duration"`
}

// rssMiB reads a process's resident set from /proc.
func rssMiB(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.Atoi(f[1])
			return kb / 1024
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// TestLoadIdleConnectionsAndLongPolls (BENCHMARKS.md): one agent on
// loopback, offered as many idle keep-alive connections as the test's file
// limit allows (up to 20,000, from 100 client addresses 127.0.0.2-101, under
// the per-client cap of 200) with a total cap of half that, and 500 long
// polls of a volume near the field size limits, keeps answering
// /v1/status/leader on fresh connections (it evicts idle ones rather than
// blocking Accept), holds no more than its cap, and its RSS stays under
// VOLHOST_LOAD_RSS_MIB (default 512). VOLHOST_LOAD_CONNS sets the number
// of idle connections; VOLHOST_LOAD_REPORT names a file for the figures.
func TestLoadIdleConnectionsAndLongPolls(t *testing.T) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	lim.Cur = lim.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	const polls = 500
	conns := chaosInt(t, "VOLHOST_LOAD_CONNS", min(20000, int(lim.Cur)-polls-1000))
	bound := chaosInt(t, "VOLHOST_LOAD_RSS_MIB", 512)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	// A total cap below the connections the test opens, so the agent must
	// evict idle ones to let new clients (the health check) in.
	maxConns := conns / 2
	agent, err := StartAgent(ctx, dir, bins.Volhost, fmt.Sprintf("log_level = \"warn\"\nhttp {\n  max_conns = %d\n}\n", maxConns))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { agent.Stop(10 * time.Second) })
	start := time.Now()
	rep := loadReport{LongPolls: polls, MaxConns: maxConns, RSSBoundMiB: bound, RSSBeforeMiB: rssMiB(t, agent.cmd.Process.Pid)}

	// A volume whose context, parameters and secrets are near their
	// bounds: what every long poll holds an answer of.
	big := map[string]string{}
	for i := 0; i < 3; i++ {
		big[fmt.Sprintf("k%d", i)] = strings.Repeat("x", 4000)
	}
	if _, err := agent.API.do(ctx, http.MethodPut, "/v1/plugins", map[string]any{"plugin": map[string]any{"id": "p1"}}, nil); err != nil {
		t.Fatal(err)
	}
	vol := map[string]any{"id": "big", "namespace": "default", "external_id": strings.Repeat("d", 1000), "plugin_id": "p1",
		"access_mode": "single-node-writer", "attachment_mode": "file-system", "context": big, "parameters": big}
	if _, err := agent.API.do(ctx, http.MethodPut, "/v1/volumes", map[string]any{"volumes": []any{vol}}, nil); err != nil {
		t.Fatal(err)
	}
	_, idx, err := agent.API.Volume(ctx, "big", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	host := strings.TrimPrefix(agent.Addr, "http://")
	_, port, _ := net.SplitHostPort(host)

	// Idle keep-alive connections: each sends one request, reads the
	// answer and stays open.
	var mu sync.Mutex
	var open []net.Conn
	t.Cleanup(func() {
		for _, c := range open {
			c.Close()
		}
	})
	var wg sync.WaitGroup
	sem := make(chan struct{}, 256)
	for i := 0; i < conns; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func(i int) {
			defer wg.Done()
			defer func() { <-sem }()
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(2+i%100))}, Timeout: 5 * time.Second}
			c, err := d.DialContext(ctx, "tcp", net.JoinHostPort("127.0.0.1", port))
			if err == nil {
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				_, err = fmt.Fprintf(c, "GET /v1/status/leader HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
			}
			if err == nil {
				var resp *http.Response
				if resp, err = http.ReadResponse(bufio.NewReader(c), nil); err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					_ = c.SetDeadline(time.Time{})
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				rep.IdleRefused++
				if c != nil {
					c.Close()
				}
				return
			}
			open = append(open, c)
		}(i)
	}
	wg.Wait()
	rep.IdleConns = len(open)

	// Long polls of the big volume, each on its own connection.
	pollCtx, stopPolls := context.WithCancel(ctx)
	defer stopPolls()
	var pollWG sync.WaitGroup
	for i := 0; i < polls; i++ {
		pollWG.Add(1)
		go func(i int) {
			defer pollWG.Done()
			tr := &http.Transport{DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 1, byte(2+i%100))}}).DialContext}
			defer tr.CloseIdleConnections()
			req, _ := http.NewRequestWithContext(pollCtx, http.MethodGet,
				fmt.Sprintf("%s/v1/volume/big?index=%d&wait=5m", agent.Addr, idx), nil)
			if resp, err := (&http.Client{Transport: tr}).Do(req); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}(i)
	}
	// Every poll's connection is up (the kernel's table of loopback TCP
	// connections is the condition, not a sleep).
	if err := Poll(ctx, 50*time.Millisecond, func() (bool, error) {
		n, err := establishedFrom(port, 1)
		return n >= polls, err
	}); err != nil {
		t.Fatalf("long polls never all connected: %v", err)
	}

	// The health check keeps answering, on fresh connections.
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	for i := 0; i < 20; i++ {
		t0 := time.Now()
		resp, err := hc.Get(agent.Addr + "/v1/status/leader")
		ms := time.Since(t0).Milliseconds()
		rep.HealthChecks++
		rep.HealthMaxMillis = max(rep.HealthMaxMillis, ms)
		if err != nil || resp.StatusCode != http.StatusOK {
			rep.HealthFailed++
			t.Errorf("health check %d under load: %v", i, err)
		}
		if resp != nil {
			resp.Body.Close()
		}
	}
	rep.RSSLoadedMiB = rssMiB(t, agent.cmd.Process.Pid)
	if rep.HeldByAgent, err = establishedFrom(port, 0); err != nil {
		t.Fatal(err)
	}
	rep.ObjectBytes = 3*4000*2 + 1000
	rep.Duration = time.Since(start).Round(time.Second).String()
	stopPolls()
	pollWG.Wait()

	b, _ := json.MarshalIndent(rep, "", "  ")
	t.Logf("load report:\n%s", b)
	if p := os.Getenv("VOLHOST_LOAD_REPORT"); p != "" {
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if rep.RSSLoadedMiB > bound {
		t.Fatalf("agent RSS %d MiB under load, over the %d MiB bound", rep.RSSLoadedMiB, bound)
	}
	if rep.IdleConns < conns/2 {
		t.Fatalf("only %d of %d idle connections were answered", rep.IdleConns, conns)
	}
	if rep.HeldByAgent > maxConns+polls {
		t.Fatalf("the agent holds %d connections, over its cap of %d", rep.HeldByAgent, maxConns)
	}
}

// establishedFrom counts established TCP connections to the agent's port
// from 127.0.<third>.x, read from /proc/net/tcp (addresses are hex, the
// IPv4 address in host byte order).
func establishedFrom(port string, third byte) (int, error) {
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		return 0, err
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		return 0, err
	}
	want := fmt.Sprintf(":%04X", p)
	n := 0
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 4 || f[3] != "01" || !strings.HasSuffix(f[1], want) {
			continue
		}
		remote := f[2] // e.g. 0201007F:D431 for 127.0.1.2
		if len(remote) >= 8 && remote[2:4] == fmt.Sprintf("%02X", third) && remote[4:8] == "007F" {
			n++
		}
	}
	return n, nil
}
