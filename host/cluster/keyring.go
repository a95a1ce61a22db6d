package cluster

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// keyringAddType adds a key to the cluster keyring and makes it the active
// one. It is a cluster-owned command like the cluster ID, but its number sits
// in the integrity range that host/structs/requests.go reserves (50-69), so
// no other feature's store command can take it. Persisted: never renumber.
const keyringAddType byte = 50

// KeySize is the AES-256 key length.
const KeySize = 32

// Key is one key of the cluster keyring. The material travels in the raft
// log and in raft snapshots (which already hold the state in clear on the
// servers' disks), never in operator snapshots or API answers.
type Key struct {
	ID        string    `json:"id"`
	Material  []byte    `json:"material"`
	CreatedAt time.Time `json:"created_at"`
}

// KeyInfo is what the API shows of a key: never its material.
type KeyInfo struct {
	ID        string    `json:"id"`
	CreatedAt time.Time `json:"created_at"`
	Active    bool      `json:"active"`
}

// keyring is the read side the snapshot codec uses (host/snapshot.Keyring).
type keyring struct{ m *meta }

// Active returns the newest key: operator snapshots are sealed with it.
func (k keyring) Active() (string, []byte, bool) {
	k.m.mu.RLock()
	defer k.m.mu.RUnlock()
	if len(k.m.keys) == 0 {
		return "", nil, false
	}
	last := k.m.keys[len(k.m.keys)-1]
	return last.ID, last.Material, true
}

// Key returns a key by ID: old keys stay so old snapshots still open.
func (k keyring) Key(id string) ([]byte, bool) {
	k.m.mu.RLock()
	defer k.m.mu.RUnlock()
	for _, key := range k.m.keys {
		if key.ID == id {
			return key.Material, true
		}
	}
	return nil, false
}

// applyKey adds a key (m.mu held). A replayed entry with a known ID is a
// no-op, so every replica ends with the same ordered keyring.
func (m *meta) applyKey(k *Key) error {
	if k == nil || k.ID == "" || len(k.Material) != KeySize {
		return errors.New("keyring add needs an ID and a 32-byte key")
	}
	for _, have := range m.keys {
		if have.ID == k.ID {
			return nil
		}
	}
	m.keys = append(m.keys, *k)
	return nil
}

func (m *meta) keyInfo() []KeyInfo {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make([]KeyInfo, len(m.keys))
	for i, k := range m.keys {
		out[i] = KeyInfo{ID: k.ID, CreatedAt: k.CreatedAt, Active: i == len(m.keys)-1}
	}
	return out
}

func (m *meta) hasKey() bool {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return len(m.keys) > 0
}

// newKey makes a fresh random key. The leader generates it and the log
// carries it, so every server holds the same bytes.
func newKey(now time.Time) (*Key, error) {
	k := &Key{ID: uuid.New().String(), Material: make([]byte, KeySize), CreatedAt: now.UTC()}
	if _, err := rand.Read(k.Material); err != nil {
		return nil, fmt.Errorf("generate key: %w", err)
	}
	return k, nil
}

// ensureKeyring creates the first key on the leader's first step-up (from
// reconcileMeta), so a cluster can seal a snapshot from its first minute.
func (c *Cluster) ensureKeyring(ctx context.Context) {
	if c.meta.hasKey() || !c.FeatureEnabled(FeatureKeyring) {
		// Without the feature: created once every server understands it.
		return
	}
	if _, err := c.RotateKey(ctx); err != nil {
		c.logger.Warn("creating the cluster keyring failed", "error", err)
	}
}

// RotateKey adds a new active key (leader only). Older keys are kept so
// snapshots sealed with them still restore.
func (c *Cluster) RotateKey(ctx context.Context) (KeyInfo, error) {
	k, err := newKey(time.Now())
	if err != nil {
		return KeyInfo{}, err
	}
	if err := c.applyMeta(ctx, keyringAddType, metaCommand{Key: k}); err != nil {
		return KeyInfo{}, fmt.Errorf("rotate keyring: %w", err)
	}
	c.logger.Info("keyring rotated", "key_id", k.ID)
	return KeyInfo{ID: k.ID, CreatedAt: k.CreatedAt, Active: true}, nil
}

// Keyring lists the keys (IDs and ages only).
func (c *Cluster) Keyring() []KeyInfo { return c.meta.keyInfo() }
