package cluster

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/hashicorp/raft"

	"github.com/volhost/volhost/host/snapshot"
	"github.com/volhost/volhost/host/state"
	"github.com/volhost/volhost/host/structs"
)

// RestoreOptions tune RestoreSnapshot.
type RestoreOptions struct {
	// ForceForeign accepts a snapshot saved by another cluster. Only the
	// cluster check is skipped: checksum and row validation still apply.
	ForceForeign bool
}

// SaveSnapshot writes the whole state as an operator snapshot (framed,
// checksummed, secrets sealed with the active keyring key: host/snapshot)
// to w. On the leader it first waits until every committed entry is
// applied.
func (c *Cluster) SaveSnapshot(ctx context.Context, w io.Writer) error {
	if c.IsLeader() {
		if err := c.Barrier(ctx); err != nil {
			return err
		}
	}
	snap := c.store.Snapshot()
	h := snapshot.Header{
		ClusterID: c.meta.clusterID(),
		Index:     snap.LatestIndex(),
		Term:      c.raft.CurrentTerm(),
		CreatedAt: time.Now().UTC(),
	}
	return snapshot.Write(w, h, snap, keyring{c.meta})
}

// RestoreSnapshot replaces the state of the whole cluster with an operator
// snapshot (leader only). The stream is read, checksummed and every row
// validated into a scratch store first; a bad file is a 400 naming what is
// wrong and changes nothing. The restored state keeps this cluster's ID,
// members and keyring: a backup restores data, not identity. Raft installs
// it on the leader and sends it to every follower as a snapshot.
//
// Memory: the upload is never buffered; the scratch store is written to
// raft through a pipe, once to learn its size (raft wants it up front) and
// once for real. Persist is canonical, so both passes give the same bytes.
func (c *Cluster) RestoreSnapshot(ctx context.Context, r io.Reader, o RestoreOptions) error {
	if !c.IsLeader() {
		return raftErr("restore snapshot", raft.ErrNotLeader)
	}
	// The restore marks its claims restored (below); a server older than
	// the mark would install the snapshot without it and, once it wrote a
	// snapshot of its own, keep a replica that differs for good.
	if g, ok := gateOf(FeatureClaimRestored); ok {
		if err := c.needFeature(g, "an operator snapshot restore, which marks the restored claims"); err != nil {
			return fmt.Errorf("restore snapshot: %w", err)
		}
	}
	// The ACL state kept is read once the upload has been read whole
	// (it may take minutes), and no ACL write commits from then until the
	// restore is installed: reading it when the call began revived a
	// token deleted while the upload ran (a leaked token revoked by an
	// administrator, or the restoring token itself).
	var releaseACL func() // set once ACL writes are held off
	defer func() {
		if releaseACL != nil {
			releaseACL()
		}
	}()
	h, scratch, err := snapshot.Read(r, keyring{c.meta}, snapshot.Options{
		ClusterID: c.meta.clusterID(), ForceForeign: o.ForceForeign,
		// The machines kept running since the snapshot was taken: its
		// claims' staging is in doubt (structs.Claim.Restored).
		MarkClaimsRestored: true,
		// A snapshot saved before the ACL bootstrap must not reopen it,
		// nor one of this cluster revive tokens deleted since: the
		// restored state keeps this cluster's ACL state. Decided
		// here, into the state raft installs on every server, so each
		// replica has the same tokens and the same bootstrap mark.
		KeepACLOf: func() (*state.Snapshot, error) {
			c.aclWrites.Lock()
			releaseACL = c.aclWrites.Unlock
			// Everything committed before this point applied here first:
			// a leader that just took over may not have applied an ACL
			// write another leader committed (a token it deleted came
			// back with the restore).
			if err := c.raft.Barrier(c.timeout(ctx)).Error(); err != nil {
				return nil, raftErr("restore snapshot", err)
			}
			return c.store.Snapshot(), nil
		},
	})
	if err != nil {
		return fmt.Errorf("%w: %w", &structs.ValidationError{Field: "snapshot", Msg: "restore refused"}, err)
	}
	hdr := c.meta.header()
	var size countWriter
	if err := writeRaftSnapshot(&size, hdr, scratch); err != nil {
		return err
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(writeRaftSnapshot(pw, hdr, scratch)) }()
	defer pr.Close()
	meta := &raft.SnapshotMeta{Version: raft.SnapshotVersionMax, Size: int64(size)}
	done := make(chan error, 1)
	go func() { done <- c.raft.Restore(meta, pr, c.timeout(ctx)) }()
	select {
	case err = <-done:
	case <-ctx.Done():
		// raft goes on installing it: ACL writes wait until it is done.
		if release := releaseACL; release != nil {
			releaseACL = nil
			go func() {
				<-done
				release()
			}()
		}
		return fmt.Errorf("restore snapshot: %w", ctx.Err())
	}
	if err != nil {
		return raftErr("restore snapshot", err)
	}
	c.logger.Info("snapshot restored", "bytes", meta.Size, "from_cluster", h.ClusterID,
		"from_index", h.Index, "created_at", h.CreatedAt, "foreign", h.ClusterID != hdr.ClusterID,
		"kept_cluster_acl", h.KeptACL)
	if h.KeptACL {
		c.logger.Warn("the cluster keeps its own ACL policies, tokens and bootstrap mark: the snapshot is this cluster's (its ACL state is older) or was saved before the ACL bootstrap")
	}
	return nil
}

// writeRaftSnapshot writes what the FSM's Restore reads: the cluster header,
// then the state store stream.
func writeRaftSnapshot(w io.Writer, h snapshotHeader, s *state.Store) error {
	if err := writeHeader(w, h); err != nil {
		return err
	}
	return s.Persist(w)
}

type countWriter int64

func (c *countWriter) Write(b []byte) (int, error) {
	*c += countWriter(len(b))
	return len(b), nil
}
