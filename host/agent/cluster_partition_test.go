package agent

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/volhost/volhost/host/csi/csitest"
	"github.com/volhost/volhost/host/structs"
)

// The classic split brain on the claim path, judged by the driver's own
// log: the leader is cut from both followers while its NodeStageVolume
// hangs at the driver, which it still reaches. The majority elects a new
// leader; the old one's NodeStage then answers, and from the partition on
// it sends nothing more (no NodePublish, no rollback undo: every call
// confirms its leadership term first), so the only call it made after the
// cut is the one already in flight. Its claim fails; the same claim sent
// to the new leader takes up the publishing record the old leader wrote
// ahead and completes. A live claim on another disk is never touched.
// After healing, every claim is released exactly once, the driver holds
// nothing, no CSI precondition was broken, and the replicas' digests
// match.
func TestClusterPartitionedLeaderMidClaim(t *testing.T) {
	o := csitest.NewOracle()
	drv := csitest.NewServer(t, csitest.Options{NodeID: "ext-node1", PublishUnpublish: true, StageUnstage: true, Oracle: o, Machine: "node1"})
	ac := startAgentCluster(t, 3)
	old := ac.leader()
	setupVolumes(t, ac.follower(old).c, drv, 1) // web-0 holds vol-0 (disk-0) throughout
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if err := retryNoLeader(t, func() error {
		_, err := old.c.RegisterVolumes(ctx, []*structs.Volume{{ID: "vol-1", ExternalID: "disk-1", PluginID: "csi",
			AccessMode: structs.AccessSingleNodeWriter, AttachmentMode: structs.AttachFilesystem}})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := retryNoLeader(t, func() error {
		_, err := old.c.UpsertAllocs(ctx, []*structs.Alloc{{ID: "web-1", NodeID: "node1", ClientStatus: structs.AllocRunning}})
		return err
	}); err != nil {
		t.Fatal(err)
	}

	hang := make(chan struct{})
	released := false
	t.Cleanup(func() {
		if !released {
			close(hang)
		}
	})
	drv.Script(csitest.NodeStage, csitest.Result{Block: hang})
	req := &structs.ClaimRequest{VolumeID: "vol-1", AllocID: "web-1", NodeID: "node1", Mode: structs.ClaimWrite}
	oldClaim := make(chan error, 1)
	go func() {
		cctx, ccancel := context.WithTimeout(ctx, 60*time.Second)
		defer ccancel()
		_, err := old.c.ClaimVolume(cctx, req)
		oldClaim <- err
	}()
	if err := drv.WaitFor(ctx, func() bool { return drv.InFlight(csitest.NodeStage) == 1 }); err != nil {
		t.Fatal(err)
	}
	cut := time.Now()
	old.trans.DisconnectAll()
	var majority []*clusterAgent
	for _, a := range ac.agents {
		if a != old {
			a.trans.Disconnect(old.trans.LocalAddr())
			majority = append(majority, a)
		}
	}
	nl := ac.leader(majority...)
	ac.waitFor("the old leader to step down", func() bool { return !old.a.Cluster.IsLeader() })
	// The old leader's NodeStage answers now, after it lost its term.
	close(hang)
	released = true
	select {
	case err := <-oldClaim:
		if err == nil {
			t.Fatal("the partitioned leader answered its claim as taken")
		}
		t.Logf("partitioned leader's claim: %v", err)
	case <-ctx.Done():
		t.Fatal("the partitioned leader's claim never answered")
	}
	if err := retryNoLeader(t, func() error { _, err := nl.c.ClaimVolume(ctx, req); return err }); err != nil {
		t.Fatalf("the same claim on the new leader: %v", err)
	}
	if !drv.Attached("disk-1", "ext-node1") {
		t.Fatal("disk-1 not attached once the new leader took the claim")
	}

	// The driver's log: after the cut, the old leader's only call is the
	// NodeStage it had in flight; the new leader's first call comes after
	// the old leader's last answer; disk-0's live claim was not touched.
	var oldLast time.Time
	var newFirst time.Time
	for _, c := range drv.AllCalls() {
		switch c.Caller {
		case old.id:
			if c.Start.After(cut) {
				t.Errorf("%s %s from the partitioned leader %s after the cut", c.Method, c.VolumeID, old.id)
			}
			if c.End.After(oldLast) {
				oldLast = c.End
			}
		case nl.id:
			if newFirst.IsZero() && c.Start.After(cut) {
				newFirst = c.Start
			}
		}
		if c.VolumeID == "disk-0" && (c.Method == csitest.ControllerUnpublish || c.Method == csitest.NodeUnstage || c.Method == csitest.NodeUnpublish) {
			t.Errorf("%s of disk-0 from %s while its claim was live", c.Method, c.Caller)
		}
	}
	if newFirst.IsZero() || !newFirst.After(oldLast) {
		t.Errorf("the new leader's first call (%s) did not come after the old leader's last answer (%s)",
			newFirst.Format(time.StampMicro), oldLast.Format(time.StampMicro))
	}

	// Heal; release both claims.
	for _, a := range majority {
		a.trans.Connect(old.trans.LocalAddr(), old.trans)
		old.trans.Connect(a.trans.LocalAddr(), a.trans)
	}
	finishAllocs(t, nl.c, 2)
	ac.waitFor("every claim released", func() bool { return claimsLeft(t, nl.a) == 0 })
	ac.waitFor("every replica identical", func() bool {
		d, _ := nl.a.Store.Digest()
		for _, a := range ac.agents {
			if o, _ := a.a.Store.Digest(); o != d {
				return false
			}
		}
		return true
	})
	evs, err := nl.a.Store.Snapshot().Events(nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	freed := map[string]int{}
	for _, e := range evs {
		if e.Type == structs.EventClaimTransition && e.Fields["state"] == string(structs.ClaimReadyToFree) {
			freed[e.AllocID]++
		}
	}
	for i := range 2 {
		if n := freed[fmt.Sprintf("web-%d", i)]; n != 1 {
			t.Errorf("claim web-%d removed %d times", i, n)
		}
		if drv.Attached(fmt.Sprintf("disk-%d", i), "ext-node1") {
			t.Errorf("disk-%d attached after every claim was released", i)
		}
	}
	if st := o.Machine("node1"); len(st.Staged) > 0 || len(st.Published) > 0 {
		t.Errorf("the driver still holds stages %v and publishes %v", st.Staged, st.Published)
	}
	for _, v := range o.Violations() {
		t.Errorf("CSI precondition broken: %+v", v)
	}
	t.Logf("%d driver calls judged; the old leader's last answer %v before the new leader's first call",
		len(drv.AllCalls()), newFirst.Sub(oldLast).Round(time.Millisecond))
}
