package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/hashicorp/raft"

	"github.com/volhost/volhost/host/state"
)

// Digest is one server's replicated state, hashed, at the last log
// command it applied. Servers that applied the same log hold the same
// state, so at the same CommandIndex their digests are equal; a
// difference is a diverged replica (chaos, partition and upgrade runs end
// by comparing them).
type Digest struct {
	Server string `json:"server"`
	Build  string `json:"build"`
	// CommandIndex is the raft index of the last command the FSM
	// applied (0 when it applied none since a snapshot restore: then
	// AppliedIndex, the snapshot's, is the one). Compare digests at equal
	// CommandIndex.
	CommandIndex uint64 `json:"command_index"`
	// AppliedIndex is raft's applied index, which also counts entries the
	// FSM never sees (configuration changes, barriers).
	AppliedIndex uint64 `json:"applied_index"`
	Digest       string `json:"digest"`
}

// digestMeta is the replicated cluster meta as the digest hashes it:
// everything but what each server holds for itself.
type digestMeta struct {
	ClusterID string           `json:"cluster_id"`
	Members   []Member         `json:"members"`
	Keys      []Key            `json:"keys"` // hashed with the rest: the digest reveals nothing of them
	Features  []EnabledFeature `json:"features"`
}

// Digest waits until this server applied the log up to index (0: no
// wait), then hashes its state: the cluster meta (ID, members, keyring
// key IDs, enabled features) and the state store's canonical Persist
// stream, read together at one log index. Nothing local is hashed: no
// raft configuration, no leadership, no module or metrics state.
func (c *Cluster) Digest(ctx context.Context, index uint64) (Digest, error) {
	for c.raft.AppliedIndex() < index {
		select {
		case <-ctx.Done():
			return Digest{}, fmt.Errorf("digest: waiting for index %d (applied %d): %w", index, c.raft.AppliedIndex(), ctx.Err())
		case <-c.stopCh:
			return Digest{}, raftErr("digest", raft.ErrRaftShutdown)
		case <-time.After(10 * time.Millisecond):
		}
	}
	snap, m, cmd := c.fsm.view()
	d, err := hashState(snap, m)
	if err != nil {
		return Digest{}, err
	}
	return Digest{Server: c.cfg.NodeID, Build: c.build(), CommandIndex: cmd, AppliedIndex: c.raft.AppliedIndex(), Digest: d}, nil
}

// view reads the store, the meta and the last command's index together
// (fsm.mu orders it with Apply).
func (f *fsm) view() (*state.Snapshot, digestMeta, uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	h := f.meta.header()
	m := digestMeta{ClusterID: h.ClusterID, Members: h.Members, Keys: h.Keyring, Features: h.Features}
	return f.store.Snapshot(), m, f.applied
}

// hashState is the digest of a store snapshot and the cluster meta.
func hashState(snap *state.Snapshot, m digestMeta) (string, error) {
	h := sha256.New()
	b, err := json.Marshal(m)
	if err != nil {
		return "", fmt.Errorf("digest: %w", err)
	}
	h.Write(append(b, '\n'))
	if err := snap.Persist(h); err != nil {
		return "", fmt.Errorf("digest: %w", err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
