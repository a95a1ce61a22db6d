package cluster

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/volhost/volhost/host/structs"
)

// BenchmarkCheckpointGroupCommit (issue 17) compares, in one process and
// on one server with raft-boltdb on disk, the watcher's release writes
// (three checkpoints per claim: node-detached, controller-detached,
// ready-to-free) from 16 concurrent writers committed one raft entry per
// checkpoint (Cluster.Apply, as before the batcher) and group-committed
// (ClaimWriter.CheckpointClaim). The sides alternate over 5 rounds (A, B,
// A, B, ...), each on claims of its own; reported: each side's process
// CPU per checkpoint, checkpoints/s and raft entries per checkpoint, and
// the per-round ratios' median with min and max.
//
//	go test -run '^$' -bench CheckpointGroupCommit -benchtime 1x ./host/cluster/
//
// VOLHOST_GROUPCOMMIT_OUT=FILE writes the table as markdown.
func BenchmarkCheckpointGroupCommit(b *testing.B) {
	const rounds, claims = 5, 400
	tc := newCluster(b, 1, b.TempDir())
	l := tc.leader()
	loadBase(b, l.c)
	ctx := testCtx(b)
	term := l.c.ReadyTerm()
	batch := 0
	// prepare registers claims volumes, claims them and completes their
	// allocs (untimed); it returns the volume IDs.
	prepare := func() []string {
		batch++
		var vols []*structs.Volume
		var allocs []*structs.Alloc
		ids := make([]string, claims)
		for i := range claims {
			ids[i] = fmt.Sprintf("g%d-%d", batch, i)
			vols = append(vols, &structs.Volume{Namespace: "default", ID: ids[i], ExternalID: "d-" + ids[i],
				PluginID: "ebs", AccessMode: structs.AccessSingleNodeWriter, AttachmentMode: structs.AttachFilesystem})
			allocs = append(allocs, &structs.Alloc{ID: "a-" + ids[i], Namespace: "default", NodeID: "n1", ClientStatus: structs.AllocRunning})
		}
		mustApply(b, l.c, structs.VolumeRegisterType, &structs.VolumeRegisterRequest{Volumes: vols})
		mustApply(b, l.c, structs.AllocUpsertType, &structs.AllocUpsertRequest{Allocs: allocs})
		for _, id := range ids {
			cl := claimReq(id, "a-"+id, "n1")
			cl.Term = term
			mustApply(b, l.c, structs.VolumeClaimType, cl)
		}
		for _, a := range allocs {
			a.ClientStatus = structs.AllocComplete
		}
		mustApply(b, l.c, structs.AllocUpsertType, &structs.AllocUpsertRequest{Allocs: allocs})
		return ids
	}
	type sideT struct {
		name  string
		write func(*structs.ClaimCheckpointRequest) error
		cpu   []float64 // us per checkpoint, by round
		rate  []float64 // checkpoints/s
		ents  []float64 // raft entries per checkpoint
	}
	w := l.c.ClaimWriter()
	sides := []*sideT{
		{name: "one entry per checkpoint", write: func(r *structs.ClaimCheckpointRequest) error {
			_, _, err := l.c.Apply(ctx, structs.ClaimCheckpointType, r)
			return err
		}},
		{name: "group commit", write: func(r *structs.ClaimCheckpointRequest) error {
			_, err := w.CheckpointClaim(ctx, r)
			return err
		}},
	}
	for b.Loop() {
		for range rounds {
			for _, s := range sides {
				ids := prepare()
				idx0, cpu0, start := l.c.LastIndex(), processCPU(b), time.Now()
				fanOut(b, claims, func(i int) error {
					for _, st := range []structs.ClaimState{structs.ClaimNodeDetached, structs.ClaimControllerDetached, structs.ClaimReadyToFree} {
						c := claimReq(ids[i], "a-"+ids[i], "n1").Claim
						c.State = st
						if err := s.write(&structs.ClaimCheckpointRequest{Namespace: "default", VolumeID: ids[i], Claim: c, Term: term}); err != nil {
							return fmt.Errorf("%s: %w", s.name, err)
						}
					}
					return nil
				})
				n := float64(3 * claims)
				s.cpu = append(s.cpu, float64((processCPU(b)-cpu0).Microseconds())/n)
				s.rate = append(s.rate, n/time.Since(start).Seconds())
				s.ents = append(s.ents, float64(l.c.LastIndex()-idx0)/n)
			}
		}
	}
	med := func(xs []float64) float64 { s := slices.Clone(xs); slices.Sort(s); return s[len(s)/2] }
	spread := func(xs []float64) string {
		return fmt.Sprintf("%.3g [%.3g-%.3g]", med(xs), slices.Min(xs), slices.Max(xs))
	}
	ratio := func(f func(*sideT) []float64) []float64 {
		out := make([]float64, rounds)
		for i := range out {
			out[i] = f(sides[1])[i] / f(sides[0])[i]
		}
		return out
	}
	var md strings.Builder
	fmt.Fprintf(&md, "%d rounds, %d claims x 3 checkpoints per side and round, %d writers.\n\n", rounds, claims, benchWriters)
	md.WriteString("| side | process CPU per checkpoint (us) | checkpoints/s | raft entries per checkpoint |\n| --- | ---: | ---: | ---: |\n")
	for _, s := range sides {
		fmt.Fprintf(&md, "| %s | %s | %s | %s |\n", s.name, spread(s.cpu), spread(s.rate), spread(s.ents))
	}
	cpuRatio, rateRatio := ratio(func(s *sideT) []float64 { return s.cpu }), ratio(func(s *sideT) []float64 { return s.rate })
	fmt.Fprintf(&md, "\ngroup commit / one entry per checkpoint, per round: CPU per checkpoint %s, throughput %s\n", spread(cpuRatio), spread(rateRatio))
	b.ReportMetric(med(cpuRatio), "cpu-ratio")
	b.ReportMetric(med(rateRatio), "throughput-ratio")
	b.ReportMetric(med(sides[1].cpu), "group-cpu-us/checkpoint")
	b.ReportMetric(med(sides[0].cpu), "single-cpu-us/checkpoint")
	b.Logf("\n%s", md.String())
	if out := os.Getenv("VOLHOST_GROUPCOMMIT_OUT"); out != "" {
		if err := os.WriteFile(out, []byte(md.String()), 0o644); err != nil {
			b.Fatal(err)
		}
	}
}

// processCPU is the user and system CPU time the process has used.
func processCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
