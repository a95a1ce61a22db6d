package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// Server is one `volhost agent -server` of a Cluster: its process, data
// dir and addresses, so it can be killed, paused and restarted.
type Server struct {
	*Proc
	ID       string
	Addr     string // http://host:port
	API      *API
	dir      string
	bin      string // the program run: volhost, or a wrapper of it (cliBin)
	cliBin   string // the volhost binary when bin wraps it (ip netns exec)
	args     []string
	stopped  bool // SIGSTOPped
	killedAt time.Time
}

// Cluster is a multi-server volhost cluster of real processes on loopback.
type Cluster struct {
	Servers []*Server
}

// StartCluster starts n servers with data dirs under dir, config (the HCL
// body of every agent file) and returns once one of them leads: s1 is the
// bootstrap_expect seed, the others join it.
func StartCluster(ctx context.Context, dir, bin string, n int, config string) (*Cluster, error) {
	return StartClusterWith(ctx, dir, bin, n, config, nil)
}

// StartClusterWith is StartCluster with extra command-line arguments per
// server (perServer may be nil), e.g. each server's own -node-rpc-addr;
// perServer takes its extra addresses from addr, which hands out ports
// distinct from every other address of the cluster.
func StartClusterWith(ctx context.Context, dir, bin string, n int, config string, perServer func(id string, addr func() (string, error)) ([]string, error)) (*Cluster, error) {
	cfgPath := filepath.Join(dir, "server.hcl")
	if err := os.WriteFile(cfgPath, []byte(config), 0o600); err != nil {
		return nil, err
	}
	// Every address of the cluster is picked before any server starts, with
	// the picked ports held (addrReservation).
	var ports addrReservation
	defer ports.release()
	addrs := make([]string, 2*n)
	for i := range addrs {
		a, err := ports.next()
		if err != nil {
			return nil, err
		}
		addrs[i] = a
	}
	c := &Cluster{}
	seed := addrs[0]
	for i := 1; i <= n; i++ {
		httpAddr, raftAddr := addrs[2*i-2], addrs[2*i-1]
		id := fmt.Sprintf("s%d", i)
		sdir := filepath.Join(dir, id)
		if err := os.MkdirAll(sdir, 0o700); err != nil {
			return nil, err
		}
		args := []string{"agent", "-server", "-node-id", id, "-data-dir", sdir, "-bind", raftAddr,
			"-http-addr", httpAddr, "-config", cfgPath}
		if perServer != nil {
			extra, err := perServer(id, ports.next)
			if err != nil {
				return nil, err
			}
			args = append(args, extra...)
		}
		if i == 1 {
			args = append(args, "-bootstrap-expect", fmt.Sprint(n))
		} else {
			args = append(args, "-join", seed)
		}
		s := &Server{ID: id, Addr: "http://" + httpAddr, dir: dir, bin: bin, args: args}
		s.API = NewAPI(s.Addr)
		c.Servers = append(c.Servers, s)
	}
	ports.release()
	for i, s := range c.Servers {
		if err := s.start(); err != nil {
			c.Servers = c.Servers[:i]
			c.Stop()
			return nil, err
		}
	}
	// A server that exits while the cluster forms (a port taken after all)
	// fails the start at once with its log, instead of a wait for a leader
	// the others cannot elect without it.
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	for _, s := range c.Servers {
		go func() {
			select {
			case <-s.Exited():
				cancel(fmt.Errorf("server %s exited while the cluster formed: %s", s.ID, s.Tail(2000)))
			case <-wctx.Done():
			}
		}()
	}
	if _, err := c.WaitLeader(wctx, nil); err != nil {
		c.Stop()
		if cause := context.Cause(wctx); cause != nil && !errors.Is(cause, context.Canceled) {
			return nil, cause
		}
		return nil, err
	}
	return c, nil
}

func (s *Server) start() error {
	p, err := Start(s.dir, s.ID, s.bin, s.args...)
	if err != nil {
		return err
	}
	s.Proc, s.killedAt = p, time.Time{}
	return nil
}

// CLI runs the volhost CLI against s with the binary s runs (in an
// upgrade, the release s is on), and returns its combined output and exit
// code.
func (s *Server) CLI(ctx context.Context, args ...string) (string, int, error) {
	bin := s.bin
	if s.cliBin != "" {
		bin = s.cliBin
	}
	return runCLI(ctx, bin, s.Addr, args...)
}

// Live reports whether the server's process runs and is not paused.
func (s *Server) Live() bool {
	select {
	case <-s.Exited():
		return false
	default:
		return !s.stopped
	}
}

// KillNow ends the process with SIGKILL, as a crash would.
func (s *Server) KillNow() {
	if s.stopped {
		_ = s.cmd.Process.Signal(syscall.SIGCONT)
		s.stopped = false
	}
	s.Kill()
	s.killedAt = time.Now()
}

// Pause stops the process (SIGSTOP): it keeps its sockets and state and
// wakes up where it was, as a VM freeze or a long GC pause does.
func (s *Server) Pause() error {
	if err := s.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return err
	}
	s.stopped = true
	return nil
}

// Resume continues a paused process (SIGCONT).
func (s *Server) Resume() error {
	if err := s.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		return err
	}
	s.stopped = false
	return nil
}

// Restart starts a killed server again on its data dir.
func (s *Server) Restart() error { return s.start() }

// WaitLeader polls the live servers (not in skip) until one reports that it
// leads, and returns it.
func (c *Cluster) WaitLeader(ctx context.Context, skip *Server) (*Server, error) {
	var leader *Server
	err := Poll(ctx, 25*time.Millisecond, func() (bool, error) {
		for _, s := range c.Servers {
			if s == skip || !s.Live() {
				continue
			}
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			ok, err := s.API.Leader(cctx)
			cancel()
			if err == nil && ok {
				leader = s
				return true, nil
			}
		}
		return false, nil
	})
	return leader, err
}

// Any returns a live server, preferring from on.
func (c *Cluster) Any(from int) *Server {
	for i := range c.Servers {
		s := c.Servers[(from+i)%len(c.Servers)]
		if s.Live() {
			return s
		}
	}
	return nil
}

// Retry runs f against live servers until it succeeds, answers something
// other than a 503 (no leader, or an outcome unknown: the write is
// idempotent), or ctx ends. Failovers make writes fail for a few seconds.
func (c *Cluster) Retry(ctx context.Context, f func(context.Context, *API) error) error {
	n := 0
	var last error
	err := Poll(ctx, 50*time.Millisecond, func() (bool, error) {
		s := c.Any(n)
		n++
		if s == nil {
			return false, nil
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		last = f(cctx, s.API)
		var he *HTTPError
		switch {
		case last == nil:
			return true, nil
		case errors.As(last, &he) && he.Status != http.StatusServiceUnavailable && he.Status != http.StatusGatewayTimeout && he.Status != http.StatusBadGateway:
			return false, last
		}
		return false, nil
	})
	if err != nil && last != nil && errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w (last: %v)", err, last)
	}
	return err
}

// Stop ends every server.
func (c *Cluster) Stop() {
	for _, s := range c.Servers {
		if s.Proc == nil {
			continue
		}
		if s.stopped {
			_ = s.Resume()
		}
		s.Stop(10 * time.Second)
	}
}
