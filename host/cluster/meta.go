package cluster

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
)

// ProtocolVersion is the cluster protocol this binary speaks: the log
// command set and the snapshot layout. A server only joins a cluster whose
// leader speaks the same version, so no replica ever receives an entry it
// cannot decode (which would make its state diverge).
const ProtocolVersion = 1

// Cluster-owned log commands. Their type byte lives above every
// structs.MessageType (those count up from 1 and are far from 200), so the
// FSM routes them without touching the state store. Persisted: append only.
const (
	clusterInitType  byte = 200 // set the cluster ID (once, at bootstrap)
	memberUpsertType byte = 201 // record a server's HTTP address
	memberRemoveType byte = 202 // forget a removed server
	// featuresEnableType enables features every server understands
	// (gate.go). It is written only once every server advertises
	// features, so no server that predates it ever receives one.
	featuresEnableType byte = 203
)

// isMetaType reports whether t is a cluster-owned command. The range is
// reserved whole, 200 and up, so a cluster command this binary does not
// know is recognised as one and stops the FSM (unknownEntry) instead of
// reaching the state store's decoder.
func isMetaType(t byte) bool {
	return t >= clusterInitType || t == keyringAddType
}

// Member is one server as the replicated state knows it: its raft ID and
// addresses. The HTTP address is what a follower forwards writes to.
type Member struct {
	ID       string `json:"id"`
	RaftAddr string `json:"raft_addr"`
	HTTPAddr string `json:"http_addr"`
	// Version is the cluster protocol version, 1 for every release:
	// releases before the feature gates refuse a join of any other
	// value, so it stays 1 and Features says what a server understands.
	Version int `json:"version"`
	// Build is the server's volhost version and Features the gated log
	// forms it understands (gate.go); both empty for a server older than
	// GateVersion.
	Build    string   `json:"build,omitempty"`
	Features []string `json:"features,omitempty"`
}

// sameMember compares two member records field by field.
func sameMember(a, b Member) bool {
	return a.ID == b.ID && a.RaftAddr == b.RaftAddr && a.HTTPAddr == b.HTTPAddr &&
		a.Version == b.Version && a.Build == b.Build && slices.Equal(a.Features, b.Features)
}

// meta is the cluster's own replicated state: the cluster ID created at
// bootstrap and the members map (raft ID -> addresses). It travels in
// every raft snapshot next to the state store, so a restored or caught-up
// server knows both.
type meta struct {
	mu      sync.RWMutex
	id      string
	members map[string]Member
	// keys is the cluster keyring, oldest first; the last one is active
	// (keyring.go).
	keys []Key
	// features are the enabled features by name (gate.go); never removed.
	features map[string]EnabledFeature
}

func newMeta() *meta {
	return &meta{members: map[string]Member{}, features: map[string]EnabledFeature{}}
}

func (m *meta) enabled(name string) bool {
	m.mu.RLock()
	defer m.mu.RUnlock()
	_, ok := m.features[name]
	return ok
}

// enabledList is the enabled features sorted by name.
func (m *meta) enabledList() []EnabledFeature {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make([]EnabledFeature, 0, len(m.features))
	for _, e := range m.features {
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b EnabledFeature) int { return strings.Compare(a.Name, b.Name) })
	return out
}

func (m *meta) enabledNames() []string {
	l := m.enabledList()
	out := make([]string, len(l))
	for i, e := range l {
		out[i] = e.Name
	}
	return out
}

func (m *meta) clusterID() string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.id
}

func (m *meta) member(id string) (Member, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	mem, ok := m.members[id]
	return mem, ok
}

func (m *meta) list() []Member {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make([]Member, 0, len(m.members))
	for _, mem := range m.members {
		out = append(out, mem)
	}
	slices.SortFunc(out, func(a, b Member) int {
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	})
	return out
}

// metaCommand is the body of a cluster-owned log command.
type metaCommand struct {
	ClusterID string  `json:"cluster_id,omitempty"`
	Member    *Member `json:"member,omitempty"`
	RemoveID  string  `json:"remove_id,omitempty"`
	Key       *Key    `json:"key,omitempty"`
	// Enable lists the features a featuresEnableType command enables.
	Enable []EnabledFeature `json:"enable,omitempty"`
}

func encodeMeta(t byte, cmd metaCommand) ([]byte, error) {
	b, err := json.Marshal(cmd)
	if err != nil {
		return nil, fmt.Errorf("encode cluster command %d: %w", t, err)
	}
	return append([]byte{t}, b...), nil
}

// apply applies a cluster-owned command. The cluster ID is set once: a
// second init (two racing bootstraps of one log cannot happen, but a
// replayed entry can) keeps the first ID, so every replica agrees.
func (m *meta) apply(t byte, data []byte) error {
	var cmd metaCommand
	if err := json.Unmarshal(data, &cmd); err != nil {
		return fmt.Errorf("decode cluster command %d: %w", t, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	switch t {
	case clusterInitType:
		if m.id == "" {
			m.id = cmd.ClusterID
		}
	case memberUpsertType:
		if cmd.Member == nil || cmd.Member.ID == "" {
			return errors.New("member upsert without a member ID")
		}
		m.members[cmd.Member.ID] = *cmd.Member
	case memberRemoveType:
		delete(m.members, cmd.RemoveID)
	case keyringAddType:
		return m.applyKey(cmd.Key)
	case featuresEnableType:
		for _, e := range cmd.Enable {
			if e.Name == "" {
				return errors.New("feature enable without a feature name")
			}
			if _, ok := m.features[e.Name]; !ok {
				m.features[e.Name] = e
			}
		}
	default:
		return fmt.Errorf("unknown cluster command %d", t)
	}
	return nil
}

// snapshotHeader is the first line of a raft snapshot (and of `operator
// snapshot save` files): the cluster meta, then the state store's own
// Persist stream. Snapshots written before the header existed start with
// the store's header and are still read.
type snapshotHeader struct {
	Version   int      `json:"volhost_cluster"`
	ClusterID string   `json:"cluster_id"`
	Members   []Member `json:"members"`
	// Keyring is absent from snapshots written before the keyring existed;
	// the next leader step-up creates one.
	Keyring []Key `json:"keyring,omitempty"`
	// Features are the enabled features. A snapshot with any is written
	// as snapshotVersionFeatures, which servers older than the gates
	// refuse with a clear error ("snapshot is cluster protocol version
	// 2") instead of restoring state written in forms they cannot read.
	Features []EnabledFeature `json:"features,omitempty"`
}

// snapshotVersionFeatures is the snapshot header version once a feature
// is enabled; ProtocolVersion (1) before.
const snapshotVersionFeatures = 2

func (m *meta) header() snapshotHeader {
	members := m.list()
	m.mu.RLock()
	keys := append([]Key(nil), m.keys...)
	m.mu.RUnlock()
	h := snapshotHeader{Version: ProtocolVersion, ClusterID: m.clusterID(), Members: members, Keyring: keys, Features: m.enabledList()}
	if len(h.Features) > 0 {
		h.Version = snapshotVersionFeatures
	}
	return h
}

func writeHeader(w io.Writer, h snapshotHeader) error {
	b, err := json.Marshal(h)
	if err != nil {
		return fmt.Errorf("encode snapshot header: %w", err)
	}
	if _, err := w.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("write snapshot header: %w", err)
	}
	return nil
}

// readHeader splits a snapshot stream into its cluster header (nil for a
// pre-header snapshot) and the state store stream that follows.
func readHeader(r io.Reader) (*snapshotHeader, io.Reader, error) {
	br := bufio.NewReader(r)
	line, err := br.ReadBytes('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, nil, fmt.Errorf("read snapshot header: %w", err)
	}
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(bytes.TrimSpace(line), &probe); err != nil {
		return nil, nil, fmt.Errorf("snapshot does not start with a JSON header: %w", err)
	}
	if _, ok := probe["volhost_cluster"]; !ok {
		// A state store stream without the cluster header.
		return nil, io.MultiReader(bytes.NewReader(line), br), nil
	}
	var h snapshotHeader
	if err := json.Unmarshal(line, &h); err != nil {
		return nil, nil, fmt.Errorf("decode snapshot header: %w", err)
	}
	if h.Version != ProtocolVersion && h.Version != snapshotVersionFeatures {
		return nil, nil, fmt.Errorf("snapshot is cluster protocol version %d, this server speaks %d and %d", h.Version, ProtocolVersion, snapshotVersionFeatures)
	}
	for _, e := range h.Features {
		if _, ok := gateOf(Feature(e.Name)); !ok {
			return nil, nil, fmt.Errorf("snapshot needs feature %q, which this server (volhost %s) does not understand: run volhost %s or later",
				e.Name, BuildVersion, e.Since)
		}
	}
	return &h, br, nil
}

// restore replaces the meta with a snapshot header's (nil: empty).
func (m *meta) restore(h *snapshotHeader) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.id = ""
	m.members = map[string]Member{}
	m.keys = nil
	m.features = map[string]EnabledFeature{}
	if h == nil {
		return
	}
	m.id = h.ClusterID
	m.keys = append([]Key(nil), h.Keyring...)
	for _, e := range h.Features {
		m.features[e.Name] = e
	}
	for _, mem := range h.Members {
		m.members[mem.ID] = mem
	}
}
