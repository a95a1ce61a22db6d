package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The helpers the multi-server tests (chaos, node agent, Nomad, partition,
// upgrade) share, one copy each: a driver with its sockets, the cluster's
// log tails on failure, the CLI through whichever server is live, and the
// spec files the CLI reads.

// writeSpec writes body (an HCL spec the CLI reads) to dir/name and
// returns its path.
func writeSpec(t testing.TB, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// startDriver starts the GCE PD driver with quick retries (50-200 ms
// unless o says otherwise), its sockets in a short temporary directory (a
// unix socket path is limited to about 100 bytes and t.TempDir can be
// longer) and its log under dir; both go when t ends.
func startDriver(ctx context.Context, t testing.TB, dir string, o GCEPDOptions) *GCEPD {
	t.Helper()
	sock, err := os.MkdirTemp("", "vh")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sock) })
	if o.BackoffInitial == 0 {
		o.BackoffInitial = 50 * time.Millisecond
	}
	if o.BackoffMax == 0 {
		o.BackoffMax = 200 * time.Millisecond
	}
	drv, err := StartGCEPD(ctx, sock, dir, bins.Gcepd, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { drv.Stop(5 * time.Second) })
	return drv
}

// stopAtCleanup stops c's servers when t ends, logging each one's log tail
// (and the binary it ran) first if t failed.
func stopAtCleanup(t testing.TB, c *Cluster) {
	t.Cleanup(func() {
		c.Stop()
		if t.Failed() {
			for _, s := range c.Servers {
				t.Logf("%s (%s) log tail:\n%s", s.ID, s.bin, s.Tail(4000))
			}
		}
	})
}

// failingOver reports whether a failed CLI answer says a failover is in
// progress: no leader yet, a node agent not yet reconnected to the new
// leader, or a server not listening (killed, restarting).
func failingOver(out string) bool {
	return strings.Contains(out, "leader") || strings.Contains(out, "not connected") || strings.Contains(out, "connection refused")
}

// CLI runs `volhost args...` through a live server of c until one answers
// with exit code 0, and returns that answer; an answer saying a failover
// is in progress is asked again (writes are forwarded to the leader), any
// other failure fails t.
func (c *Cluster) CLI(ctx context.Context, t testing.TB, args ...string) string {
	t.Helper()
	var out string
	err := Poll(ctx, 100*time.Millisecond, func() (bool, error) {
		s := c.Any(0)
		if s == nil {
			return false, nil
		}
		o, code, err := s.CLI(ctx, args...)
		out = o
		switch {
		case err != nil:
			return false, err
		case code == 0:
			return true, nil
		case failingOver(o):
			return false, nil
		}
		return false, fmt.Errorf("volhost %s: exit %d: %s", strings.Join(args, " "), code, o)
	})
	if ctx.Err() != nil {
		t.Fatalf("volhost %s: %v (last answer: %s)", strings.Join(args, " "), err, out)
	}
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// waitReleased waits until volume id has no claims, read through any live
// server.
func (c *Cluster) waitReleased(ctx context.Context, id string) error {
	return Poll(ctx, 20*time.Millisecond, func() (bool, error) {
		s := c.Any(0)
		if s == nil {
			return false, nil
		}
		v, _, err := s.API.Volume(ctx, id, 0, 0)
		return err == nil && len(v.Claims) == 0, nil
	})
}

// waitNodeAgent waits until node's agent is connected: its node steps go
// through it.
func (c *Cluster) waitNodeAgent(ctx context.Context, node string) error {
	return Poll(ctx, 100*time.Millisecond, func() (bool, error) {
		s := c.Any(0)
		if s == nil {
			return false, nil
		}
		out, code, err := s.CLI(ctx, "node", "status", node)
		return err == nil && code == 0 && strings.Contains(out, "node steps go through the node agent"), nil
	})
}

// registerDriver registers drv as plugin "gcepd", nodes (each with its
// driver endpoint and a root dir under dir) and one single-writer volume
// per disk, vol0 on disk-0 and so on, through any live server, and
// returns the volumes.
func registerDriver(ctx context.Context, t testing.TB, c *Cluster, dir string, drv *GCEPD, nodes []string, disks int) []VolumeSpec {
	t.Helper()
	c.CLI(ctx, t, "plugin", "register", writeSpec(t, dir, "plugin.hcl", fmt.Sprintf("plugin \"gcepd\" {\n  controller_endpoint = %q\n}\n", Endpoint(drv.Controller))))
	for _, n := range nodes {
		c.CLI(ctx, t, "node", "register", writeSpec(t, dir, n+".hcl", fmt.Sprintf("node %q {\n  status = \"ready\"\n  root_dir = %q\n  plugin \"gcepd\" {\n    endpoint = %q\n  }\n}\n",
			n, filepath.Join(dir, "root-"+n), Endpoint(drv.Nodes[n]))))
	}
	var vols []VolumeSpec
	for i := 0; i < disks; i++ {
		vols = append(vols, VolumeSpec{ID: fmt.Sprintf("vol%d", i), Namespace: "default", ExternalID: drv.VolumeID(fmt.Sprintf("disk-%d", i)),
			PluginID: "gcepd", AccessMode: "single-node-writer", AttachmentMode: "file-system", FSType: "ext4"})
	}
	if err := c.Retry(ctx, func(ctx context.Context, a *API) error { return a.RegisterVolumes(ctx, vols) }); err != nil {
		t.Fatal(err)
	}
	return vols
}
