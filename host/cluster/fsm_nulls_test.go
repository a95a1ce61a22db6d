package cluster

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/volhost/volhost/host/state"
	"github.com/volhost/volhost/host/structs"
)

// validRequests are, for every message type the FSM applies, a request
// the store accepts on testdata/base.json with allocation a1's claim on
// vol-sw (nullsBase), every nested object and list filled in.
func validRequests(t testing.TB, now time.Time) map[structs.MessageType]any {
	b := readBase(t)
	claim := func() *structs.Claim {
		return &structs.Claim{AllocID: "a1", NodeID: "n1", Mode: structs.ClaimWrite, State: structs.ClaimTaken, ExternalNodeID: "i-0001",
			PublishContext: map[string]string{"device": "/dev/xvdf"}, StagingPath: "/s", TargetPath: "/t",
			LastError: &structs.ClaimError{Message: "x"}, Hold: &structs.ClaimHold{Module: "m", Reason: "r", Until: now, Since: now}}
	}
	ck := func() *structs.ClaimCheckpointRequest {
		return &structs.ClaimCheckpointRequest{Namespace: "default", VolumeID: "vol-sw", Claim: claim()}
	}
	tok := &structs.ACLToken{AccessorID: "acc-2", SecretHash: strings.Repeat("a", 64), Name: "t", Type: structs.ACLClientToken, Policies: []string{"p"}, CreateTime: now}
	return map[structs.MessageType]any{
		structs.PluginUpsertType:     &structs.PluginUpsertRequest{Plugin: b.Plugins[0]},
		structs.PluginDeregisterType: &structs.PluginDeregisterRequest{PluginID: "spare"},
		structs.NodeUpsertType:       &structs.NodeUpsertRequest{Node: b.Nodes[1]},
		structs.NodeStatusUpdateType: &structs.NodeStatusUpdateRequest{NodeID: "n3", Status: structs.NodeDown, LastSeen: now},
		structs.NodeDeregisterType:   &structs.NodeDeregisterRequest{NodeID: "n4"},
		structs.VolumeRegisterType:   &structs.VolumeRegisterRequest{Volumes: []*structs.Volume{b.Volumes[0], b.Volumes[3]}},
		structs.VolumeDeregisterType: &structs.VolumeDeregisterRequest{Namespace: "default", VolumeID: "vol-ms"},
		structs.AllocUpsertType:      &structs.AllocUpsertRequest{Allocs: b.Allocs},
		structs.AllocDeleteType:      &structs.AllocDeleteRequest{AllocIDs: []string{"a3"}},
		structs.VolumeClaimType: &structs.VolumeClaimRequest{Namespace: "default", VolumeID: "vol-mw", Claim: &structs.Claim{AllocID: "a2", NodeID: "n2", Mode: structs.ClaimWrite,
			PublishContext: map[string]string{"d": "x"}, LastError: &structs.ClaimError{Message: "x"}, Hold: &structs.ClaimHold{Module: "m"}}},
		structs.VolumeClaimRemoveType:    &structs.VolumeClaimRemoveRequest{Namespace: "default", VolumeID: "vol-mw", AllocID: "a5", ModifyIndex: uint64(len(baseEntries(t, now)) + 2)},
		structs.ClaimCheckpointType:      ck(),
		structs.ClaimCheckpointBatchType: &structs.ClaimCheckpointBatchRequest{Checkpoints: []*structs.ClaimCheckpointRequest{ck()}},
		structs.VolumeStuckType:          &structs.VolumeStuckRequest{Namespace: "default", VolumeID: "vol-sw", Stuck: &structs.Stuck{Reason: "r", Attempts: 1}},
		structs.ClaimGCType:              &structs.ClaimGCRequest{Volumes: []structs.VolumeRef{{Namespace: "default", ID: "vol-sw"}}},
		structs.LeftoversClearType:       &structs.LeftoversClearRequest{All: true},
		structs.EventAppendType:          &structs.EventAppendRequest{Events: []*structs.Event{{Type: structs.EventModule, Module: "m", Message: "x", Fields: map[string]string{"k": "v"}}}},
		structs.NodeFenceType:            &structs.NodeFenceRequest{NodeID: "n3", Fence: &structs.NodeFence{Reason: "off", Source: structs.FenceSourceOperator, Time: now}},
		structs.NodeLivenessType:         &structs.NodeLivenessRequest{NodeID: "n3", Status: structs.NodeDown, From: structs.NodeReady, Time: now},
		structs.ACLBootstrapType:         &structs.ACLBootstrapRequest{Token: &structs.ACLToken{AccessorID: "acc-0", SecretHash: strings.Repeat("b", 64), Name: "boot", Type: structs.ACLManagementToken, CreateTime: now}},
		structs.ACLPolicyUpsertType:      &structs.ACLPolicyUpsertRequest{Policies: []*structs.ACLPolicy{{Name: "p", Rules: `namespace "default" { policy = "read" }`}}},
		structs.ACLPolicyDeleteType:      &structs.ACLPolicyDeleteRequest{Names: []string{"p"}},
		structs.ACLTokenUpsertType:       &structs.ACLTokenUpsertRequest{Tokens: []*structs.ACLToken{tok}},
		structs.ACLTokenDeleteType:       &structs.ACLTokenDeleteRequest{AccessorIDs: []string{"acc-1"}},
	}
}

// nullsBase is an FSM holding testdata/base.json, a1's claim on vol-sw,
// a5's publishing claim on vol-mw (the entry after it), a
// plugin no volume uses, a node without allocations, ACL policy p and a
// token of it (acc-1), and the index of its last entry.
func nullsBase(t testing.TB, now time.Time) (*fsm, uint64) {
	t.Helper()
	fs := &fsm{store: state.NewStore(), meta: newMeta(), logger: hclog.NewNullLogger()}
	entries := baseEntries(t, now)
	claim, err := encodeCommand(structs.VolumeClaimType, now, claimReq("vol-sw", "a1", "n1"))
	if err != nil {
		t.Fatal(err)
	}
	entries = append(entries, claim)
	pub, err := encodeCommand(structs.VolumeClaimType, now, &structs.VolumeClaimRequest{Namespace: "default", VolumeID: "vol-mw",
		Claim: &structs.Claim{AllocID: "a5", NodeID: "n1", Mode: structs.ClaimWrite, State: structs.ClaimPublishing, ExternalNodeID: "ext-n1"}})
	if err != nil {
		t.Fatal(err)
	}
	entries = append(entries, pub)
	for _, r := range []struct {
		typ structs.MessageType
		req any
	}{
		{structs.PluginUpsertType, &structs.PluginUpsertRequest{Plugin: &structs.Plugin{ID: "spare"}}},
		{structs.NodeUpsertType, &structs.NodeUpsertRequest{Node: &structs.Node{ID: "n4", Status: structs.NodeReady}}},
		{structs.ACLPolicyUpsertType, &structs.ACLPolicyUpsertRequest{Policies: []*structs.ACLPolicy{{Name: "p", Rules: `namespace "default" { policy = "read" }`}}}},
	} {
		e, err := encodeCommand(r.typ, now, r.req)
		if err != nil {
			t.Fatal(err)
		}
		entries = append(entries, e)
	}
	tok, err := encodeCommand(structs.ACLTokenUpsertType, now, &structs.ACLTokenUpsertRequest{Tokens: []*structs.ACLToken{{AccessorID: "acc-1", SecretHash: strings.Repeat("c", 64), Name: "t1", Type: structs.ACLClientToken, Policies: []string{"p"}, CreateTime: now}}})
	if err != nil {
		t.Fatal(err)
	}
	entries = append(entries, tok)
	for i, e := range entries {
		if res := fs.Apply(&raft.Log{Index: uint64(i + 1), Term: 1, Type: raft.LogCommand, Data: e}).(fsmResult); res.err != nil {
			t.Fatalf("base entry %d: %v", i, res.err)
		}
	}
	return fs, uint64(len(entries))
}

// nullVariants returns doc (a decoded JSON value) once for every object
// or list inside it, at any depth, and every member of a map or list,
// with that one value replaced by null, keyed by its path.
func nullVariants(doc any) map[string]any {
	out := map[string]any{}
	var walk func(path string, v any, set func(any))
	walk = func(path string, v any, set func(any)) {
		switch x := v.(type) {
		case map[string]any:
			keys := make([]string, 0, len(x))
			for k := range x {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				old := x[k]
				walk(path+"."+k, old, func(n any) { x[k] = n })
			}
		case []any:
			for i, old := range x {
				walk(fmt.Sprintf("%s[%d]", path, i), old, func(n any) { x[i] = n })
			}
		default:
			return
		}
		if set == nil {
			return
		}
		set(nil)
		out[path] = deepCopyJSON(doc)
		set(v)
	}
	walk("req", doc, nil)
	return out
}

func deepCopyJSON(v any) any {
	b, _ := json.Marshal(v)
	var out any
	_ = json.Unmarshal(b, &out)
	return out
}

// Nothing in a log entry may panic the FSM: every replica would stop at
// the same entry, and again after each restart. For every message type, a
// request the store accepts is applied once with each nested object, list,
// map value or list item replaced by null (a claim in a batch, a node's
// plugin, a volume's claims ...); each is applied or refused, and a
// refused one leaves the state as it was.
func TestFSMApplyNestedNulls(t *testing.T) {
	now := time.Date(2026, 12, 2, 4, 0, 0, 0, time.UTC)
	reqs := validRequests(t, now)
	for _, typ := range fuzzTypes {
		req, ok := reqs[typ]
		if !ok {
			t.Fatalf("no valid request for message type %d", typ)
		}
		t.Run(fmt.Sprint(typ), func(t *testing.T) {
			fs, idx := nullsBase(t, now)
			e, err := encodeCommand(typ, now, req)
			if err != nil {
				t.Fatal(err)
			}
			if res := fs.Apply(&raft.Log{Index: idx + 1, Term: 1, Type: raft.LogCommand, Data: e}).(fsmResult); res.err != nil {
				t.Fatalf("the valid request is refused: %v", res.err)
			}
			body, err := json.Marshal(req)
			if err != nil {
				t.Fatal(err)
			}
			var doc any
			if err := json.Unmarshal(body, &doc); err != nil {
				t.Fatal(err)
			}
			variants := nullVariants(doc)
			if len(variants) == 0 {
				t.Skip("no nested values")
			}
			for path, v := range variants {
				fs, idx := nullsBase(t, now)
				before := digest(t, fs.store)
				b, _ := json.Marshal(v)
				entry := append([]byte{byte(typ)}, fmt.Sprintf(`{"time":%q,"req":%s}`, now.Format(time.RFC3339), b)...)
				res := fs.Apply(&raft.Log{Index: idx + 1, Term: 1, Type: raft.LogCommand, Data: entry}).(fsmResult)
				if res.err != nil && digest(t, fs.store) != before {
					t.Fatalf("%s null: refused (%v), and the state changed", path, res.err)
				}
			}
		})
	}
}

// FuzzFSMRestore: a raft snapshot of any bytes is installed or refused
// with an error, never a panic, and a refused one changes neither the
// store nor the cluster meta. The seeds are a snapshot of nullsBase's
// state, the same with a null claim, and with a claim whose key is not
// its allocation.
func FuzzFSMRestore(f *testing.F) {
	now := time.Date(2026, 12, 2, 4, 0, 0, 0, time.UTC)
	good := fsmSnapshotBytes(f, now)
	f.Add(good)
	claim := claimA1(good)
	f.Add(bytes.Replace(good, claim, []byte(`"a1":null`), 1))
	f.Add(bytes.Replace(good, claim, append([]byte(`"a9"`), claim[len(`"a1"`):]...), 1))
	f.Fuzz(func(t *testing.T, snap []byte) {
		fs := &fsm{store: state.NewStore(), meta: newMeta(), logger: hclog.NewNullLogger()}
		if err := fs.Restore(nopCloser{bytes.NewReader(good)}); err != nil {
			t.Fatal(err)
		}
		before, id := digest(t, fs.store), fs.meta.clusterID()
		if err := fs.Restore(nopCloser{bytes.NewReader(snap)}); err != nil {
			if digest(t, fs.store) != before || fs.meta.clusterID() != id {
				t.Fatalf("refused (%v), and the state changed", err)
			}
		}
	})
}

// The null-claim snapshot is refused by the FSM with an error naming the
// row, and the replica keeps its state (it used to crash in the restore).
func TestFSMRestoreRefusesNullClaim(t *testing.T) {
	now := time.Date(2026, 12, 2, 4, 0, 0, 0, time.UTC)
	good := fsmSnapshotBytes(t, now)
	bad := bytes.Replace(good, claimA1(good), []byte(`"a1":null`), 1)
	fs := &fsm{store: state.NewStore(), meta: newMeta(), logger: hclog.NewNullLogger()}
	if err := fs.Restore(nopCloser{bytes.NewReader(good)}); err != nil {
		t.Fatal(err)
	}
	before := digest(t, fs.store)
	err := fs.Restore(nopCloser{bytes.NewReader(bad)})
	if err == nil || !strings.Contains(err.Error(), "default/vol-sw") || !strings.Contains(err.Error(), "claims[a1]: is null") {
		t.Fatalf("restore: %v, want the null claim of default/vol-sw refused", err)
	}
	if digest(t, fs.store) != before {
		t.Fatal("a refused snapshot changed the state")
	}
}

// fsmSnapshotBytes is what the FSM's snapshot of nullsBase's state
// persists: the cluster header, then the store's stream.
func fsmSnapshotBytes(t testing.TB, now time.Time) []byte {
	t.Helper()
	fs, _ := nullsBase(t, now)
	fs.meta.restore(&snapshotHeader{Version: ProtocolVersion, ClusterID: "c-1"})
	var buf bytes.Buffer
	if err := writeHeader(&buf, fs.meta.header()); err != nil {
		t.Fatal(err)
	}
	if err := fs.store.Persist(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// claimA1 is the bytes of a1's claim on vol-sw ("a1":{...}) in a
// snapshot stream.
func claimA1(stream []byte) []byte {
	i := bytes.Index(stream, []byte(`"claims":{"a1":{`))
	if i < 0 {
		return nil
	}
	start := i + len(`"claims":{`)
	depth := 0
	for j := start + len(`"a1":`); j < len(stream); j++ {
		switch stream[j] {
		case '{':
			depth++
		case '}':
			depth--
			if depth == 0 {
				return stream[start : j+1]
			}
		}
	}
	return nil
}
