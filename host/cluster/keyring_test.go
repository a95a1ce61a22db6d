package cluster

import (
	"bytes"
	"testing"
)

// The first leader creates a key; rotation adds one that every server
// holds; a snapshot sealed with the old key still restores after it.
func TestKeyringRotateReplicatesAndKeepsOldKeys(t *testing.T) {
	tc := newCluster(t, 3)
	l := tc.leader()
	loadBase(t, l.c)
	tc.waitConverged()
	first := l.c.Keyring()
	if len(first) != 1 || !first[0].Active {
		t.Fatalf("keyring after bootstrap: %+v", first)
	}
	var buf bytes.Buffer
	if err := l.c.SaveSnapshot(testCtx(t), &buf); err != nil {
		t.Fatal(err)
	}
	k, err := l.c.RotateKey(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	tc.waitConverged()
	for _, n := range tc.nodes {
		keys := n.c.Keyring()
		if len(keys) != 2 || keys[0].ID != first[0].ID || keys[0].Active || keys[1].ID != k.ID || !keys[1].Active {
			t.Fatalf("%s keyring after rotate: %+v", n.id, keys)
		}
	}
	if err := l.c.RestoreSnapshot(testCtx(t), &buf, RestoreOptions{}); err != nil {
		t.Fatalf("restoring a snapshot sealed with the previous key: %v", err)
	}
	var again bytes.Buffer
	if err := l.c.SaveSnapshot(testCtx(t), &again); err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(again.Bytes(), []byte(`"key_id":"`+k.ID+`"`)) {
		t.Fatal("a new snapshot is not sealed with the new active key")
	}
}

// A raft snapshot written before the keyring existed still restores, with
// an empty keyring that the next step-up fills.
func TestMetaRestoreWithoutKeyring(t *testing.T) {
	m := newMeta()
	if err := m.apply(keyringAddType, []byte(`{"key":{"id":"k","material":"`+
		"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="+`"}}`)); err != nil {
		t.Fatal(err)
	}
	if !m.hasKey() {
		t.Fatal("key not applied")
	}
	m.restore(&snapshotHeader{Version: ProtocolVersion, ClusterID: "c"})
	if m.hasKey() || m.clusterID() != "c" {
		t.Fatal("restore of a header without keyring kept the old keys")
	}
	if err := m.apply(keyringAddType, []byte(`{"key":{"id":"k","material":"AAAA"}}`)); err == nil {
		t.Fatal("a short key was accepted")
	}
}
