package e2e

import (
	"bufio"
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// scaleReport is what TestScaleCluster measured, in one run.
type scaleReport struct {
	Volumes int       `json:"volumes"`
	Claims  int       `json:"claims"`
	Clients int       `json:"clients"`
	Servers int       `json:"servers"`
	Started time.Time `json:"started"`
	Seconds float64   `json:"seconds"`

	LoadSeconds   float64 `json:"load_seconds"`
	VolumesPerSec float64 `json:"volumes_per_sec"`
	ClaimSeconds  float64 `json:"claim_seconds"`
	ClaimsPerSec  float64 `json:"claims_per_sec"`
	// ClaimsRefused counts claims answered 503 (the leader could not
	// confirm its leadership in time under the load) or whose answer was
	// lost, and sent again.
	ClaimsRefused  int     `json:"claims_refused_503"`
	ReleaseSeconds float64 `json:"release_seconds"`
	ReleasesPerSec float64 `json:"releases_per_sec"`

	// RSSHeldMiB is each server's RSS with every claim held; RSSMaxMiB the
	// largest sampled over the run (restarts and rejoins included).
	RSSHeldMiB map[string]int `json:"rss_held_mib"`
	RSSMaxMiB  map[string]int `json:"rss_max_mib"`
	// RSSHeldParts splits RSSHeldMiB into anonymous memory (the Go heap)
	// and mapped files (the bolt log, the binary).
	RSSHeldParts map[string][2]int `json:"rss_held_anon_file_mib"`
	// HeapHeldMiB is each server's Go heap in use and the heap its last
	// collection found live (half the next goal), with the claims held.
	HeapHeldMiB map[string][2]int `json:"heap_held_inuse_live_mib"`

	// ReleaseWork is what the leader's metrics say the releases waited
	// for: its group commits of claim checkpoints and its CSI calls,
	// counted between the start of the releases and their end.
	ReleaseWork leaderWork `json:"release_work"`
	// ReleaseServers is what each server spent over the releases, from
	// its own counters: where a release's cost grows with the table (the
	// leader's collector, say) without a profiler on the servers.
	ReleaseServers map[string]serverWork `json:"release_servers"`
	ReleaseLeader  string                `json:"release_leader"`

	SnapshotSaveSeconds float64 `json:"operator_snapshot_save_seconds"`
	SnapshotBytes       int64   `json:"operator_snapshot_bytes"`

	// RaftSnapshots are raft's own snapshots, from the servers' logs.
	RaftSnapshots          []raftSnapshot `json:"raft_snapshots"`
	RaftSnapshotMaxSeconds float64        `json:"raft_snapshot_max_seconds"`
	// RaftSnapshotMaxOverlap is the most servers snapshotting at one
	// moment (the target: fewer than all of them).
	RaftSnapshotMaxOverlap int `json:"raft_snapshot_max_overlap"`

	Restart restartReport `json:"restart"`
	Rejoin  restartReport `json:"wiped_rejoin"`

	RoutesHeld          []routeTiming `json:"ui_routes_claims_held"`
	RoutesReleased      []routeTiming `json:"ui_routes_after_releases"`
	ReadsDuringClaims   []routeTiming `json:"reads_during_claims"`
	ReadsDuringReleases []routeTiming `json:"reads_during_releases"`

	// LeaderChanges counts leaderships taken after the first (every
	// server's "entering leader state"); QuorumLost a leader's "failed to
	// contact quorum of nodes", HeartbeatTimeouts a follower's "heartbeat
	// timeout reached, starting election" (a restarted follower may log
	// one before the leader reaches it: pre-vote keeps the leader).
	LeaderChanges     int `json:"leader_changes"`
	QuorumLost        int `json:"quorum_lost"`
	HeartbeatTimeouts int `json:"heartbeat_timeouts"`
	leaderships       int
	// LeaderEvents are those lines, each with its server, its time and
	// the phase of the run it fell in (what the load was then).
	LeaderEvents []leaderEvent `json:"leader_events,omitempty"`
	// Phases are the run's phases in order, each from its start.
	Phases []phase `json:"phases"`
}

// leaderWork is a count of the leader's group commits and CSI calls
// with their summed latencies (its metrics' histograms' _count and _sum).
type leaderWork struct {
	Commits       float64               `json:"checkpoint_commits"`
	Checkpoints   float64               `json:"checkpoints"`
	CommitSeconds float64               `json:"checkpoint_commit_seconds"`
	CSI           map[string][2]float64 `json:"csi_calls_seconds"` // method: calls, seconds
}

// minus is w less an earlier reading of the same counters.
func (w leaderWork) minus(before leaderWork) leaderWork {
	d := leaderWork{Commits: w.Commits - before.Commits, Checkpoints: w.Checkpoints - before.Checkpoints,
		CommitSeconds: w.CommitSeconds - before.CommitSeconds, CSI: map[string][2]float64{}}
	for m, v := range w.CSI {
		d.CSI[m] = [2]float64{v[0] - before.CSI[m][0], v[1] - before.CSI[m][1]}
	}
	return d
}

// serverWork is one server's process CPU, bytes allocated and completed
// collections (its process and Go collectors' counters).
type serverWork struct {
	CPUSeconds  float64 `json:"cpu_seconds"`
	AllocBytes  float64 `json:"alloc_bytes"`
	Collections float64 `json:"collections"`
}

func (w serverWork) minus(before serverWork) serverWork {
	return serverWork{CPUSeconds: w.CPUSeconds - before.CPUSeconds, AllocBytes: w.AllocBytes - before.AllocBytes,
		Collections: w.Collections - before.Collections}
}

// phase is one step of the run (loading, claims, ...) from its start.
type phase struct {
	Name  string    `json:"name"`
	Start time.Time `json:"start"`
}

// leaderEvent is one leadership line of a server's log.
type leaderEvent struct {
	Server  string    `json:"server"`
	Time    time.Time `json:"time"`
	Message string    `json:"message"`
	Phase   string    `json:"phase"`
}

// leaderMessages are the log lines that mark a leadership change or its
// cause (see LeaderChanges).
var leaderMessages = []string{"entering leader state", "failed to contact quorum of nodes", "heartbeat timeout reached, starting election"}

// mark starts a phase of the run now.
func (rep *scaleReport) mark(name string) {
	rep.Phases = append(rep.Phases, phase{Name: name, Start: time.Now().UTC()})
}

// phaseAt names the phase t fell in.
func (rep *scaleReport) phaseAt(t time.Time) string {
	name := "start"
	for _, p := range rep.Phases {
		if !t.Before(p.Start) {
			name = p.Name
		}
	}
	return name
}

// raftSnapshot is one of raft's own snapshots on one server.
type raftSnapshot struct {
	Server  string    `json:"server"`
	Start   time.Time `json:"start"`
	Seconds float64   `json:"seconds"`
	// EncodeSeconds and CloseSeconds split Seconds: the state's encoding
	// into raft's sink, and the sink's close (raft's file store flushes,
	// fsyncs and renames there), from the "snapshot written" line.
	EncodeSeconds float64 `json:"encode_seconds,omitempty"`
	CloseSeconds  float64 `json:"close_seconds,omitempty"`
}

// logLine is one JSON log line of an agent (log_json = true).
type logLine struct {
	Time    time.Time
	Message string
	// Encode and Close are the durations a "snapshot written" line carries.
	Encode, Close time.Duration
}

// logRead is what scanLog found.
type logRead struct{ lines []logLine }

func logSize(path string) (int64, error) {
	st, err := os.Stat(path)
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}

func scanLog(path string) (logRead, error) { return scanLogFrom(path, 0) }

// scanLogFrom reads the JSON log lines of path from byte offset from on;
// other lines (a panic's text) are skipped.
func scanLogFrom(path string, from int64) (logRead, error) {
	f, err := os.Open(path)
	if err != nil {
		return logRead{}, err
	}
	defer f.Close()
	if _, err := f.Seek(from, 0); err != nil {
		return logRead{}, err
	}
	var r logRead
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var l struct {
			Time    string        `json:"@timestamp"`
			Message string        `json:"@message"`
			Encode  time.Duration `json:"encode"`
			Close   time.Duration `json:"close"`
		}
		if json.Unmarshal(sc.Bytes(), &l) != nil {
			continue
		}
		ts, err := time.Parse(time.RFC3339Nano, l.Time)
		if err != nil {
			ts, err = time.Parse("2006-01-02T15:04:05.000000Z07:00", l.Time)
		}
		if err != nil {
			continue
		}
		r.lines = append(r.lines, logLine{Time: ts, Message: l.Message, Encode: l.Encode, Close: l.Close})
	}
	return r, sc.Err()
}

func (r logRead) count(msg string) int {
	n := 0
	for _, l := range r.lines {
		if strings.HasPrefix(l.Message, msg) {
			n++
		}
	}
	return n
}

// spans pairs every line starting with from with the next starting with to.
func (r logRead) spans(from, to string) [][2]time.Time {
	var out [][2]time.Time
	var open *time.Time
	for _, l := range r.lines {
		switch {
		case strings.HasPrefix(l.Message, from):
			t := l.Time
			open = &t
		case strings.HasPrefix(l.Message, to) && open != nil:
			out = append(out, [2]time.Time{*open, l.Time})
			open = nil
		}
	}
	return out
}

// span is the last from→to span in seconds (0 if none).
func (r logRead) span(from, to string) float64 {
	s := r.spans(from, to)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)-1][1].Sub(s[len(s)-1][0]).Seconds()
}

// raftSnapshots pairs every "starting snapshot" line with the next
// "snapshot complete", and takes the split from a "snapshot written" line
// between them.
func (r logRead) raftSnapshots(server string) []raftSnapshot {
	var out []raftSnapshot
	var open *raftSnapshot
	for _, l := range r.lines {
		switch {
		case strings.HasPrefix(l.Message, "starting snapshot up to"):
			open = &raftSnapshot{Server: server, Start: l.Time.UTC()}
		case open == nil:
		case strings.HasPrefix(l.Message, "snapshot written"):
			open.EncodeSeconds, open.CloseSeconds = l.Encode.Seconds(), l.Close.Seconds()
		case strings.HasPrefix(l.Message, "snapshot complete up to"):
			open.Seconds = l.Time.Sub(open.Start).Seconds()
			out = append(out, *open)
			open = nil
		}
	}
	return out
}

func (rep *scaleReport) addLog(server string, r logRead) {
	rep.RaftSnapshots = append(rep.RaftSnapshots, r.raftSnapshots(server)...)
	rep.leaderships += r.count("entering leader state")
	for _, l := range r.lines {
		for _, m := range leaderMessages {
			if strings.HasPrefix(l.Message, m) {
				rep.LeaderEvents = append(rep.LeaderEvents, leaderEvent{Server: server, Time: l.Time.UTC(), Message: m, Phase: rep.phaseAt(l.Time)})
			}
		}
	}
	rep.QuorumLost += r.count("failed to contact quorum of nodes")
	rep.HeartbeatTimeouts += r.count("heartbeat timeout reached, starting election")
}

// longestSnapshot is the raft snapshot that took longest.
func (rep *scaleReport) longestSnapshot() (raftSnapshot, bool) {
	if len(rep.RaftSnapshots) == 0 {
		return raftSnapshot{}, false
	}
	return slices.MaxFunc(rep.RaftSnapshots, func(a, b raftSnapshot) int { return cmp.Compare(a.Seconds, b.Seconds) }), true
}

func (rep *scaleReport) finish() {
	rep.LeaderChanges = max(rep.leaderships-1, 0)
	slices.SortFunc(rep.LeaderEvents, func(a, b leaderEvent) int { return a.Time.Compare(b.Time) })
	slices.SortFunc(rep.RaftSnapshots, func(a, b raftSnapshot) int { return a.Start.Compare(b.Start) })
	type edge struct {
		t     time.Time
		delta int
	}
	var edges []edge
	if longest, ok := rep.longestSnapshot(); ok {
		rep.RaftSnapshotMaxSeconds = longest.Seconds
	}
	for _, s := range rep.RaftSnapshots {
		end := s.Start.Add(time.Duration(s.Seconds * float64(time.Second)))
		edges = append(edges, edge{s.Start, 1}, edge{end, -1})
	}
	// Ends sort before starts at the same instant: touching is not overlap.
	slices.SortFunc(edges, func(a, b edge) int {
		if c := a.t.Compare(b.t); c != 0 {
			return c
		}
		return a.delta - b.delta
	})
	n := 0
	for _, e := range edges {
		n += e.delta
		rep.RaftSnapshotMaxOverlap = max(rep.RaftSnapshotMaxOverlap, n)
	}
}

// markdown is the table for this run.
func (rep *scaleReport) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d volumes, %d claims by %d clients, %d servers (run of %s, %.0f s):\n\n",
		rep.Volumes, rep.Claims, rep.Clients, rep.Servers, rep.Started.Format("2006-01-02 15:04Z"), rep.Seconds)
	b.WriteString("| figure | result |\n| --- | --- |\n")
	ids := make([]string, 0, len(rep.RSSHeldMiB))
	for id := range rep.RSSHeldMiB {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	var held, peak, heap []string
	for _, id := range ids {
		held = append(held, fmt.Sprintf("%s %d (anon %d, files %d)", id, rep.RSSHeldMiB[id], rep.RSSHeldParts[id][0], rep.RSSHeldParts[id][1]))
		peak = append(peak, fmt.Sprintf("%s %d", id, rep.RSSMaxMiB[id]))
		if h, ok := rep.HeapHeldMiB[id]; ok {
			heap = append(heap, fmt.Sprintf("%s %d / %d", id, h[0], h[1]))
		}
	}
	fmt.Fprintf(&b, "| RSS per server with the claims held, MiB | %s |\n", strings.Join(held, ", "))
	if len(heap) > 0 {
		fmt.Fprintf(&b, "| Go heap per server with the claims held: in use / live at the last collection, MiB | %s |\n", strings.Join(heap, ", "))
	}
	fmt.Fprintf(&b, "| RSS per server, largest over the run, MiB | %s |\n", strings.Join(peak, ", "))
	fmt.Fprintf(&b, "| volumes loaded (PUT /v1/volumes, 1,000 per request) | %.1f s, %.0f/s |\n", rep.LoadSeconds, rep.VolumesPerSec)
	fmt.Fprintf(&b, "| raft's own snapshots | %d, longest %.2f s, at most %d of %d servers at one moment |\n",
		len(rep.RaftSnapshots), rep.RaftSnapshotMaxSeconds, rep.RaftSnapshotMaxOverlap, rep.Servers)
	if longest, ok := rep.longestSnapshot(); ok && longest.EncodeSeconds > 0 {
		fmt.Fprintf(&b, "| the longest raft snapshot: encoding / sink's flush, fsync and rename | %.2f / %.2f s |\n", longest.EncodeSeconds, longest.CloseSeconds)
	}
	fmt.Fprintf(&b, "| operator snapshot save | %.2f s (%.0f MiB) |\n", rep.SnapshotSaveSeconds, float64(rep.SnapshotBytes)/(1<<20))
	fmt.Fprintf(&b, "| restart on its own data dir: restore / caught up | %.2f / %.2f s |\n", rep.Restart.RestoreSeconds, rep.Restart.CaughtUpSeconds)
	fmt.Fprintf(&b, "| wiped follower rejoins: snapshot installed / caught up | %.2f / %.2f s |\n", rep.Rejoin.InstallSeconds, rep.Rejoin.CaughtUpSeconds)
	fmt.Fprintf(&b, "| claims through the API, %d clients (answered 503 or lost, and sent again) | %.0f/s (%d) |\n", rep.Clients, rep.ClaimsPerSec, rep.ClaimsRefused)
	fmt.Fprintf(&b, "| releases after allocations complete | %.0f/s |\n", rep.ReleasesPerSec)
	if w := rep.ReleaseWork; w.Commits > 0 && rep.Claims > 0 {
		fmt.Fprintf(&b, "| the releases' group commits on the leader: entries, checkpoints per entry, mean commit | %.0f, %.1f, %.1f ms |\n",
			w.Commits, w.Checkpoints/w.Commits, 1000*w.CommitSeconds/w.Commits)
		for _, m := range slices.Sorted(maps.Keys(w.CSI)) {
			if v := w.CSI[m]; v[0] > 0 {
				fmt.Fprintf(&b, "| the releases' %s calls from the leader: per release, mean | %.2f, %.2f ms |\n", m, v[0]/float64(rep.Claims), 1000*v[1]/v[0])
			}
		}
	}
	if len(rep.ReleaseServers) > 0 && rep.Claims > 0 {
		var per []string
		for _, id := range slices.Sorted(maps.Keys(rep.ReleaseServers)) {
			w, role := rep.ReleaseServers[id], ""
			if id == rep.ReleaseLeader {
				role = " (leader)"
			}
			n := float64(rep.Claims)
			per = append(per, fmt.Sprintf("%s%s %.2f ms, %.0f KB, %.2f", id, role, 1000*w.CPUSeconds/n, w.AllocBytes/n/1000, 1000*w.Collections/n))
		}
		fmt.Fprintf(&b, "| the releases' cost per server: CPU and bytes allocated per release, collections per 1,000 releases | %s |\n", strings.Join(per, "; "))
	}
	for _, r := range rep.RoutesHeld {
		if r.Route == "/v1/stats" {
			fmt.Fprintf(&b, "| `GET /v1/stats`, claims held: median [min-max] of %d | %.1f [%.1f-%.1f] ms |\n", r.N, r.MedianMs, r.MinMs, r.MaxMs)
		}
	}
	for _, r := range rep.ReadsDuringClaims {
		fmt.Fprintf(&b, "| `GET %s` once a second during the claims: median [min-max] of %d | %.1f [%.1f-%.1f] ms |\n", r.Route, r.N, r.MedianMs, r.MinMs, r.MaxMs)
	}
	fmt.Fprintf(&b, "| leader changes (quorum lost, follower heartbeat timeouts) | %d (%d, %d) |\n", rep.LeaderChanges, rep.QuorumLost, rep.HeartbeatTimeouts)
	if len(rep.LeaderEvents) > 0 {
		b.WriteString("\nLeadership lines of the servers' logs, seconds from the start, and the phase of the run:\n\n")
		for _, e := range rep.LeaderEvents {
			fmt.Fprintf(&b, "- %.1f s, %s, %s: %s\n", e.Time.Sub(rep.Started).Seconds(), e.Phase, e.Server, e.Message)
		}
	}
	b.WriteString("\nEach route the web UI reads, the leader answering, median [min-max] of the rounds, ms:\n\n")
	b.WriteString("| route | claims held | after the releases |\n| --- | ---: | ---: |\n")
	for i, r := range rep.RoutesHeld {
		after := ""
		if i < len(rep.RoutesReleased) {
			a := rep.RoutesReleased[i]
			after = fmt.Sprintf("%.1f [%.1f-%.1f]", a.MedianMs, a.MinMs, a.MaxMs)
		}
		fmt.Fprintf(&b, "| `%s` | %.1f [%.1f-%.1f] | %s |\n", r.Route, r.MedianMs, r.MinMs, r.MaxMs, after)
	}
	return b.String()
}

// The report's raft snapshots come from the agents' own log lines: a span
// from "starting snapshot" to "snapshot complete", split by the "snapshot
// written" line between them (hclog writes a duration as nanoseconds).
func TestRaftSnapshotsFromLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s1.log")
	log := `{"@message":"starting snapshot up to","@timestamp":"2026-12-05T07:30:00.000000Z","index":10}
{"@message":"snapshot written","@timestamp":"2026-12-05T07:30:02.500000Z","encode":2000000000,"close":500000000}
{"@message":"snapshot complete up to","@timestamp":"2026-12-05T07:30:02.750000Z","index":10}
not json: a panic's text
{"@message":"starting snapshot up to","@timestamp":"2026-12-05T07:32:00.000000Z","index":20}
{"@message":"snapshot complete up to","@timestamp":"2026-12-05T07:32:01.000000Z","index":20}
`
	if err := os.WriteFile(path, []byte(log), 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := scanLog(path)
	if err != nil {
		t.Fatal(err)
	}
	got := r.raftSnapshots("s1")
	want := []raftSnapshot{
		{Server: "s1", Start: time.Date(2026, 12, 5, 7, 30, 0, 0, time.UTC), Seconds: 2.75, EncodeSeconds: 2, CloseSeconds: 0.5},
		{Server: "s1", Start: time.Date(2026, 12, 5, 7, 32, 0, 0, time.UTC), Seconds: 1},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("snapshots %+v, want %+v", got, want)
	}
	rep := scaleReport{RaftSnapshots: got}
	if longest, ok := rep.longestSnapshot(); !ok || longest != want[0] {
		t.Fatalf("longest %+v, want %+v", longest, want[0])
	}
}
