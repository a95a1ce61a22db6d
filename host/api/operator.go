package api

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/volhost/volhost/host/cluster"
)

// Operator routes (served once EnableCluster is called):
//
//	GET    /v1/status/peers                  -> ["raft address", ...] (this server's view)
//	GET    /v1/operator/raft/configuration   -> {"cluster_id", "servers": [Peer...], "enabled_features"}
//	GET    /v1/operator/raft/digest          ?index=N (wait until applied) -> cluster.Digest; with ?stale=true the server asked answers
//	POST   /v1/operator/raft/join            cluster.JoinRequest -> cluster.JoinResponse
//	DELETE /v1/operator/raft/peer?id=ID      -> {"removed"}
//	PUT    /v1/operator/raft/transfer-leader ?id=ID (any voter when omitted) -> {"leader"}
//	GET    /v1/operator/snapshot             -> the whole state (application/octet-stream)
//	PUT    /v1/operator/snapshot             body: a saved snapshot (application/octet-stream) ?force_foreign=true; restored through raft on every server
//	GET    /v1/operator/keyring              -> [KeyInfo...] (IDs and ages, never key material)
//	PUT    /v1/operator/keyring/rotate       -> KeyInfo of the new active key
//
// Both snapshot routes and the keyring routes need operator:write
// (routeRules in auth.go enforces it at route registration).
const (
	joinPath = cluster.JoinPath
	// maxSnapshotBytes bounds a restore upload (the normal body limit is
	// for JSON requests, far smaller than a state).
	maxSnapshotBytes = 1 << 30
)

// membershipChecker refuses joins and removals that would leave the
// cluster without quorum. *cluster.Cluster implements it.
type membershipChecker interface {
	CheckJoin(ctx context.Context, req cluster.JoinRequest) error
	CheckRemove(ctx context.Context, id string) error
}

// RaftConfigurationResponse answers GET /v1/operator/raft/configuration.
type RaftConfigurationResponse struct {
	ClusterID string         `json:"cluster_id"`
	Servers   []cluster.Peer `json:"servers"`
	// EnabledFeatures are the gated log forms the cluster writes: every
	// server advertised them.
	EnabledFeatures []string `json:"enabled_features,omitempty"`
}

// featureGate and digester are the parts of *cluster.Cluster behind the
// feature gates and the replica digest (optional: test operators lack
// them).
type featureGate interface{ EnabledFeatures() []string }

type digester interface {
	Digest(ctx context.Context, index uint64) (cluster.Digest, error)
}

// RemovePeerResponse answers DELETE /v1/operator/raft/peer.
type RemovePeerResponse struct {
	Removed string `json:"removed"`
}

// TransferLeaderResponse answers PUT /v1/operator/raft/transfer-leader.
type TransferLeaderResponse struct {
	// Leader is the raft ID asked for ("" when any voter was acceptable).
	Leader string `json:"leader"`
}

func (s *Server) operatorRoutes() {
	m := s.mux
	m.HandleFunc("GET /v1/status/peers", s.statusPeers)
	m.HandleFunc("GET /v1/operator/raft/configuration", s.raftConfiguration)
	m.HandleFunc("GET /v1/operator/raft/digest", s.raftDigest)
	m.HandleFunc("POST "+joinPath, s.raftJoin)
	m.HandleFunc("PUT "+joinPath, s.raftJoin)
	m.HandleFunc("DELETE /v1/operator/raft/peer", s.raftRemovePeer)
	m.HandleFunc("PUT /v1/operator/raft/transfer-leader", s.raftTransfer)
	m.HandleFunc("POST /v1/operator/raft/transfer-leader", s.raftTransfer)
	m.HandleFunc("GET /v1/operator/snapshot", s.snapshotSave)
	m.HandleFunc("PUT /v1/operator/snapshot", s.snapshotRestore)
	m.HandleFunc("POST /v1/operator/snapshot", s.snapshotRestore)
	m.HandleFunc("GET /v1/operator/keyring", s.keyringList)
	m.HandleFunc("PUT /v1/operator/keyring/rotate", s.keyringRotate)
	m.HandleFunc("POST /v1/operator/keyring/rotate", s.keyringRotate)
}

func (s *Server) statusPeers(w http.ResponseWriter, _ *http.Request) {
	peers, err := s.fwd.op.Peers()
	if err != nil {
		WriteError(w, err)
		return
	}
	out := make([]string, 0, len(peers))
	for _, p := range peers {
		out = append(out, p.RaftAddr)
	}
	setStaleness(w, s.fwd.op)
	WriteJSON(w, http.StatusOK, out)
}

func (s *Server) raftConfiguration(w http.ResponseWriter, _ *http.Request) {
	peers, err := s.fwd.op.Peers()
	if err != nil {
		WriteError(w, err)
		return
	}
	if peers == nil {
		peers = []cluster.Peer{}
	}
	out := RaftConfigurationResponse{ClusterID: s.fwd.op.ID(), Servers: peers}
	if g, ok := s.fwd.op.(featureGate); ok {
		out.EnabledFeatures = g.EnabledFeatures()
	}
	WriteJSON(w, http.StatusOK, out)
}

// raftDigest answers this server's state digest once it applied ?index.
func (s *Server) raftDigest(w http.ResponseWriter, r *http.Request) {
	d, ok := s.fwd.op.(digester)
	if !ok {
		WriteError(w, &httpError{status: http.StatusNotImplemented, msg: "this server computes no digest"})
		return
	}
	var index uint64
	if v := r.URL.Query().Get("index"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			WriteError(w, badRequest("index", "must be a raft index"))
			return
		}
		index = n
	}
	ctx, cancel := context.WithTimeout(r.Context(), digestWait)
	defer cancel()
	out, err := d.Digest(ctx, index)
	if err != nil {
		WriteError(w, err)
		return
	}
	setStaleness(w, s.fwd.op)
	WriteJSON(w, http.StatusOK, out)
}

// digestWait bounds how long a digest waits for its index.
const digestWait = 30 * time.Second

func (s *Server) raftJoin(w http.ResponseWriter, r *http.Request) {
	var req cluster.JoinRequest
	if err := s.decodeBody(w, r, &req); err != nil {
		WriteError(w, err)
		return
	}
	if mc, ok := s.fwd.op.(membershipChecker); ok {
		if err := mc.CheckJoin(r.Context(), req); err != nil {
			WriteError(w, err)
			return
		}
	}
	resp, err := s.fwd.op.Join(r.Context(), req)
	if err != nil {
		WriteError(w, err)
		return
	}
	code := http.StatusOK
	if resp.Pending {
		code = http.StatusAccepted
	}
	WriteJSON(w, code, resp)
}

func (s *Server) raftRemovePeer(w http.ResponseWriter, r *http.Request) {
	id := r.URL.Query().Get("id")
	if err := ValidateID("id", id); err != nil {
		WriteError(w, err)
		return
	}
	if mc, ok := s.fwd.op.(membershipChecker); ok {
		if err := mc.CheckRemove(r.Context(), id); err != nil {
			WriteError(w, err)
			return
		}
	}
	if err := s.fwd.op.RemovePeer(r.Context(), id); err != nil {
		WriteError(w, err)
		return
	}
	WriteJSON(w, http.StatusOK, RemovePeerResponse{Removed: id})
}

func (s *Server) raftTransfer(w http.ResponseWriter, r *http.Request) {
	id := r.URL.Query().Get("id")
	if id != "" {
		if err := ValidateID("id", id); err != nil {
			WriteError(w, err)
			return
		}
	}
	if err := s.fwd.op.TransferLeadership(r.Context(), id); err != nil {
		WriteError(w, err)
		return
	}
	WriteJSON(w, http.StatusOK, TransferLeaderResponse{Leader: id})
}

// snapshotSave writes the snapshot to a spool file before answering, so a
// failure is an error status rather than a truncated 200, then sends it
// with its length. Not in memory: at 1,000,000 volumes a save is 369 MiB,
// and a buffer of it (grown by doubling, twice that at its peak) pushed the
// leader's heap over its memory limit; the collector then ran in every
// allocating goroutine, raft's heartbeats among them, and the leader lost
// its quorum during the save (BENCHMARKS "A million volumes through raft").
// Consul's snapshot save spools to a file the same way.
//
// One save runs at a time on a server (the leader: followers forward
// saves to it): each spools the whole state (369 MiB at 1,000,000 volumes)
// into the data dir raft's log lives on, and encodes it on the CPUs raft's
// heartbeats need; a full data dir fails raft's log appends and the leader
// steps down. A second save is refused with 429 and Retry-After rather
// than queued, a save stops at its next write once its caller has gone,
// and one whose caller stops reading ends within saveStallTimeout.
func (s *Server) snapshotSave(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodHead {
		// Go's mux lets a GET pattern answer HEAD: here that would encode
		// and spool a whole save only to send none of it.
		w.Header().Set("Allow", "GET, PUT, POST")
		WriteError(w, &httpError{status: http.StatusMethodNotAllowed,
			msg: "HEAD /v1/operator/snapshot is not served: a save is only taken to be sent; use GET"})
		return
	}
	select {
	case s.saving <- struct{}{}:
		defer func() { <-s.saving }()
	default:
		w.Header().Set("Retry-After", strconv.Itoa(int(saveRetryAfter/time.Second)))
		WriteError(w, &httpError{status: http.StatusTooManyRequests,
			msg: "a snapshot save is already running on server " + s.fwd.op.ID() + " (the leader takes every save, one at a time: each is a whole copy of the state in its data dir); retry when it is done"})
		return
	}
	spool, err := openSpool(s.cfg.SpoolDir)
	if err != nil {
		WriteError(w, err)
		return
	}
	defer spool.Close()
	if err := s.fwd.op.SaveSnapshot(r.Context(), &spoolWriter{ctx: r.Context(), f: spool}); err != nil {
		WriteError(w, err)
		return
	}
	size, err := spool.Seek(0, io.SeekCurrent)
	if err == nil {
		_, err = spool.Seek(0, io.SeekStart)
	}
	if err != nil {
		WriteError(w, fmt.Errorf("snapshot save: spool: %w", err))
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
	setStaleness(w, s.fwd.op)
	w.WriteHeader(http.StatusOK)
	s.sendSpool(w, spool)
}

// saveStallTimeout is how long a save's caller may take no byte of it. The
// save holds the one slot until it is sent: a caller that read the status
// line and then nothing kept every other save refused for the route's
// whole write deadline (SnapshotTimeout, 30 minutes), and through the read
// forwarding every save of the cluster, with nothing being encoded. Each
// MiB must now be taken within this, which still lets a link of 100 KB/s
// fetch a save.
const saveStallTimeout = 10 * time.Second

// sendSpool sends the spooled save, a MiB at a time, each within
// saveStallTimeout and all within the route's SnapshotTimeout.
func (s *Server) sendSpool(w http.ResponseWriter, spool io.Reader) {
	rc := http.NewResponseController(w)
	end := time.Now().Add(s.cfg.SnapshotTimeout)
	buf := make([]byte, 1<<20)
	for {
		n, rerr := spool.Read(buf)
		if n > 0 {
			// An error means the writer takes no deadline (a recorder).
			d := time.Now().Add(saveStallTimeout)
			if d.After(end) {
				d = end
			}
			_ = rc.SetWriteDeadline(d)
			if _, err := w.Write(buf[:n]); err != nil {
				return
			}
		}
		if rerr != nil {
			return
		}
	}
}

// saveRetryAfter is the Retry-After of a save refused for the one in
// flight: a save of 1,000,000 volumes takes about 7 s.
const saveRetryAfter = 10 * time.Second

// spoolHint says what a spool failure asks of the operator.
const spoolHint = "the agent writes a save to its data dir before sending it: check its free space and permissions"

// openSpool creates an anonymous file in dir (the system's temporary
// directory when empty): it is unlinked at once, so nothing is left behind
// by a crash, and only this process can read it while it is open. The
// snapshot's secrets are sealed with the keyring in any case.
func openSpool(dir string) (*os.File, error) {
	f, err := os.CreateTemp(dir, ".snapshot-save-*")
	if err != nil {
		return nil, fmt.Errorf("snapshot save: spool file: %w (%s)", err, spoolHint)
	}
	if err := os.Remove(f.Name()); err != nil {
		f.Close()
		return nil, fmt.Errorf("snapshot save: spool file: %w", err)
	}
	return f, nil
}

// spoolWriter is the save's way into the spool. It ends the save at its
// next write once the caller has gone (the encoder checks no context of
// its own), and a write that fails part way (ENOSPC, EFBIG, a quota) says
// what to check, as the open does.
type spoolWriter struct {
	ctx context.Context
	f   *os.File
}

func (sw *spoolWriter) Write(b []byte) (int, error) {
	if err := sw.ctx.Err(); err != nil {
		return 0, fmt.Errorf("snapshot save: stopped, its caller went away: %w", err)
	}
	n, err := sw.f.Write(b)
	if err != nil {
		return n, fmt.Errorf("snapshot save: spool file: %w (%s)", err, spoolHint)
	}
	return n, nil
}

// snapshotRestore streams the upload into the snapshot decoder: the body is
// bounded but never buffered whole (host/cluster/snapshot.go).
func (s *Server) snapshotRestore(w http.ResponseWriter, r *http.Request) {
	force, err := queryBool(r, "force_foreign")
	if err != nil {
		WriteError(w, err)
		return
	}
	if r.ContentLength > maxSnapshotBytes {
		WriteError(w, tooLarge(maxSnapshotBytes))
		return
	}
	body := http.MaxBytesReader(w, r.Body, maxSnapshotBytes)
	if err := s.fwd.op.RestoreSnapshot(r.Context(), body, cluster.RestoreOptions{ForceForeign: force}); err != nil {
		WriteError(w, err)
		return
	}
	WriteJSON(w, http.StatusOK, struct {
		Restored bool `json:"restored"`
	}{true})
}

func (s *Server) keyringList(w http.ResponseWriter, _ *http.Request) {
	keys := s.fwd.op.Keyring()
	if keys == nil {
		keys = []cluster.KeyInfo{}
	}
	WriteJSON(w, http.StatusOK, keys)
}

func (s *Server) keyringRotate(w http.ResponseWriter, r *http.Request) {
	k, err := s.fwd.op.RotateKey(r.Context())
	if err != nil {
		WriteError(w, err)
		return
	}
	WriteJSON(w, http.StatusOK, k)
}
