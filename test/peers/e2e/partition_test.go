package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/volhost/volhost/test/peers/internal/fault"
)

// startNetCluster starts three servers, each in its own namespace of lab,
// and returns once one leads.
func startNetCluster(ctx context.Context, t *testing.T, lab *netLab, dir, bin, config string) *Cluster {
	t.Helper()
	cfgPath := filepath.Join(dir, "server.hcl")
	if err := os.WriteFile(cfgPath, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	cl := &Cluster{}
	for i := 1; i <= len(lab.ns); i++ {
		id := fmt.Sprintf("s%d", i)
		httpAddr, raftAddr := lab.ip(i)+":4747", lab.ip(i)+":4748"
		args := []string{"netns", "exec", lab.ns[i-1], bin, "agent", "-server", "-node-id", id, "-data-dir", filepath.Join(dir, id),
			"-bind", raftAddr, "-http-addr", httpAddr, "-config", cfgPath}
		if i == 1 {
			args = append(args, "-bootstrap-expect", fmt.Sprint(len(lab.ns)))
		} else {
			args = append(args, "-join", lab.ip(1)+":4747")
		}
		s := &Server{ID: id, Addr: "http://" + httpAddr, dir: dir, bin: "ip", cliBin: bin, args: args}
		s.API = NewAPI(s.Addr)
		if err := s.start(); err != nil {
			t.Fatal(err)
		}
		cl.Servers = append(cl.Servers, s)
	}
	stopAtCleanup(t, cl)
	if _, err := cl.WaitLeader(ctx, nil); err != nil {
		t.Fatal(err)
	}
	return cl
}

// partitionEvent is one cut the test made.
type partitionEvent struct {
	Kind      string
	Old, New  string
	At, Until time.Time
}

// TestPartitionSplitBrain (RELIABILITY.md): three real servers, each in
// its own network namespace, release claims against the GCE PD driver
// (every ControllerUnpublish takes 100 ms) while the test cuts links with
// blackhole routes. The classic split brain: the leader cut from both
// followers while its releases are in flight, still reaching the driver
// (unix sockets); and a flapping link: the leader's links cut for 2 s and
// healed for 0.5 s, three times. Judged by the driver's own log: no call from one
// server overlaps in time a call from another (two servers acting at
// once), no call from a cut-off leader after the new leader's first call,
// every claim removed exactly once, nothing attached, staged or published
// at the end, and every replica's digest equal once the links are healed.
func TestPartitionSplitBrain(t *testing.T) {
	if testing.Short() {
		t.Skip("makes network namespaces and runs three agent processes")
	}
	lab := newNetLab(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const disks = 8
	nodes := []string{"n1", "n2"}
	dir := t.TempDir()
	drv := startDriver(ctx, t, dir, GCEPDOptions{Nodes: nodes, Disks: disks})
	cl := startNetCluster(ctx, t, lab, dir, bins.Volhost, defaultWatcher+`
log_level = "debug"
events {
  per_volume = 100000
}
`)
	start := time.Now()
	vols := registerDriver(ctx, t, cl, dir, drv, nodes, disks)
	if err := drv.Control.Fault(ctx, fault.Rule{Method: "ControllerUnpublishVolume", Hang: "100ms"}); err != nil {
		t.Fatal(err)
	}
	index := map[string]int{}
	for i, s := range cl.Servers {
		index[s.ID] = i + 1
	}
	startedUnpublish := func() int {
		r, err := drv.Control.Calls(ctx)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, c := range r.Started {
			if c.Method == "ControllerUnpublishVolume" {
				n++
			}
		}
		return n
	}
	// released waits until every volume is free, read through any server
	// of the majority (a cut-off one answers stale or not at all).
	released := func(r int, avoid *Server) {
		t.Helper()
		for _, v := range vols {
			if err := Poll(ctx, 20*time.Millisecond, func() (bool, error) {
				for _, s := range cl.Servers {
					if s == avoid {
						continue
					}
					cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
					got, _, err := s.API.Volume(cctx, v.ID, 0, 0)
					ccancel()
					if err == nil && len(got.Claims) == 0 {
						return true, nil
					}
				}
				return false, nil
			}); err != nil {
				t.Fatalf("round %d: %s never released: %v", r, v.ID, err)
			}
		}
	}
	var events []partitionEvent
	claimRetries := 0
	const rounds = 4
	for r := 0; r < rounds; r++ {
		var allocs []AllocSpec
		for i := 0; i < disks; i++ {
			allocs = append(allocs, AllocSpec{ID: fmt.Sprintf("r%d-a%d", r, i), Namespace: "default", NodeID: nodes[i%len(nodes)], ClientStatus: "running"})
		}
		if err := cl.Retry(ctx, func(ctx context.Context, a *API) error { return a.UpsertAllocs(ctx, allocs) }); err != nil {
			t.Fatal(err)
		}
		for i, a := range allocs {
			req := ClaimRequest{Namespace: "default", VolumeID: vols[i].ID, AllocID: a.ID, NodeID: a.NodeID, Mode: "write"}
			if err := Poll(ctx, 50*time.Millisecond, func() (bool, error) {
				err := cl.Retry(ctx, func(ctx context.Context, api *API) error { return api.Claim(ctx, req) })
				if err != nil {
					claimRetries++
				}
				return err == nil, nil
			}); err != nil {
				t.Fatalf("round %d: claim %s: %v", r, a.ID, err)
			}
		}
		base := startedUnpublish()
		for i := range allocs {
			allocs[i].ClientStatus = "complete"
		}
		if err := cl.Retry(ctx, func(ctx context.Context, a *API) error { return a.UpsertAllocs(ctx, allocs) }); err != nil {
			t.Fatal(err)
		}
		leader, err := cl.WaitLeader(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		li := index[leader.ID]
		others := func() []int {
			var out []int
			for _, s := range cl.Servers {
				if s != leader {
					out = append(out, index[s.ID])
				}
			}
			return out
		}()
		strike := func() {
			if err := Poll(ctx, 2*time.Millisecond, func() (bool, error) { return startedUnpublish() > base, nil }); err != nil {
				t.Fatal(err)
			}
		}
		switch r {
		case 1: // the leader cut from both followers, still reaching the driver
			strike()
			ev := partitionEvent{Kind: "split", Old: leader.ID, At: time.Now()}
			for _, o := range others {
				lab.cut(li, o)
			}
			next, err := cl.WaitLeader(ctx, leader)
			if err != nil {
				t.Fatal(err)
			}
			ev.New = next.ID
			released(r, leader)
			for _, o := range others {
				lab.heal(li, o)
			}
			ev.Until = time.Now()
			events = append(events, ev)
			t.Logf("round %d: %s cut off from %v; %s leads; healed after %s", r, leader.ID, others, next.ID, ev.Until.Sub(ev.At).Round(time.Millisecond))
		case 2: // a flapping link: cut for 2 s (past the election timeout), healed for 0.5 s, three times
			strike()
			ev := partitionEvent{Kind: "flap", Old: leader.ID, At: time.Now()}
			for k := 0; k < 3; k++ {
				for _, o := range others {
					lab.cut(li, o)
				}
				tick := time.NewTimer(2 * time.Second)
				<-tick.C
				for _, o := range others {
					lab.heal(li, o)
				}
				tick = time.NewTimer(500 * time.Millisecond)
				<-tick.C
			}
			ev.Until = time.Now()
			next, err := cl.WaitLeader(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			ev.New = next.ID
			events = append(events, ev)
			t.Logf("round %d: %s's links flapped 3 times; %s leads", r, leader.ID, next.ID)
		}
		released(r, nil)
	}

	// The driver's log is the judge.
	calls, err := drv.Control.Calls(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cs := append([]fault.Call(nil), calls.Calls...)
	sort.Slice(cs, func(i, j int) bool { return cs[i].Start.Before(cs[j].Start) })
	crossOverlaps := 0
	for i := range cs {
		for j := 0; j < i; j++ {
			if cs[j].Caller != cs[i].Caller && cs[i].Start.Before(cs[j].End) {
				crossOverlaps++
				t.Errorf("%s %s from %s at %s while %s %s from %s ran [%s, %s]", cs[i].Method, cs[i].VolumeID, cs[i].Caller,
					cs[i].Start.Format(time.StampMicro), cs[j].Method, cs[j].VolumeID, cs[j].Caller,
					cs[j].Start.Format(time.StampMicro), cs[j].End.Format(time.StampMicro))
			}
		}
	}
	fromDeposed := 0
	for _, ev := range events {
		if ev.Kind != "split" {
			continue
		}
		var first time.Time
		for _, c := range cs {
			if c.Caller == ev.New && c.Start.After(ev.At) {
				first = c.Start
				break
			}
		}
		for _, c := range cs {
			if c.Caller == ev.Old && !first.IsZero() && c.Start.After(first) && c.Start.Before(ev.Until) {
				fromDeposed++
				t.Errorf("%s %s from the cut-off leader %s at %s, after %s's first call at %s", c.Method, c.VolumeID, c.Caller,
					c.Start.Format(time.StampMicro), ev.New, first.Format(time.StampMicro))
			}
		}
	}
	overlaps := overlappingDetaches(t, calls.Calls)
	attached, held := driverLeftovers(ctx, t, drv, disks, nodes, calls.Calls)
	removed, err := claimRemovals(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	once := 0
	for r := 0; r < rounds; r++ {
		for i := 0; i < disks; i++ {
			if n := removed[fmt.Sprintf("vol%d/r%d-a%d", i, r, i)]; n == 1 {
				once++
			} else {
				t.Errorf("claim r%d-a%d of vol%d removed %d times", r, i, i, n)
			}
		}
	}
	d := compareDigests(ctx, t, cl, len(cl.Servers))
	t.Logf("partition report: %d claims, %d removed exactly once; %d claim retries; %d driver calls judged; "+
		"%d calls overlapping another server's, %d from a cut-off leader after the new leader's first, %d overlapping detaches; "+
		"%d disks attached and %d node publishes left at the end; digests %s at command index %d; %s",
		rounds*disks, once, claimRetries, len(cs), crossOverlaps, fromDeposed, overlaps, attached, held,
		d.Verdict, d.Servers[0].CommandIndex, time.Since(start).Round(time.Second))
}
