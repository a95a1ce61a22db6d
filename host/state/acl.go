package state

import (
	"fmt"

	memdb "github.com/hashicorp/go-memdb"

	"github.com/volhost/volhost/host/structs"
)

// ACL tables. Tokens are keyed by accessor ID and indexed by the
// SHA-256 of their secret: the secret itself is never stored.
const (
	TableACLPolicies  = "acl_policies"
	TableACLTokens    = "acl_tokens"
	TableACLBootstrap = "acl_bootstrap"

	indexSecretHash = "secret_hash"
	bootstrapKey    = "bootstrap"
)

// aclBootstrapRow records that the cluster was bootstrapped, and when.
type aclBootstrapRow struct {
	Key   string `json:"key"`
	Index uint64 `json:"index"`
}

// addACLTables adds the ACL tables to the schema.
func addACLTables(tables map[string]*memdb.TableSchema) {
	id := func(field string) *memdb.IndexSchema {
		return &memdb.IndexSchema{Name: indexID, Unique: true, Indexer: &memdb.StringFieldIndex{Field: field}}
	}
	tables[TableACLPolicies] = &memdb.TableSchema{Name: TableACLPolicies, Indexes: map[string]*memdb.IndexSchema{indexID: id("Name")}}
	tables[TableACLTokens] = &memdb.TableSchema{Name: TableACLTokens, Indexes: map[string]*memdb.IndexSchema{
		indexID:         id("AccessorID"),
		indexSecretHash: {Name: indexSecretHash, Unique: true, Indexer: &memdb.StringFieldIndex{Field: "SecretHash"}},
	}}
	tables[TableACLBootstrap] = &memdb.TableSchema{Name: TableACLBootstrap, Indexes: map[string]*memdb.IndexSchema{indexID: id("Key")}}
}

// ACLPolicies lists every policy by name.
func (snap *Snapshot) ACLPolicies(ws memdb.WatchSet) ([]*structs.ACLPolicy, error) {
	return aclAll[structs.ACLPolicy](snap, ws, TableACLPolicies)
}

// ACLPolicyByName returns one policy (nil when missing).
func (snap *Snapshot) ACLPolicyByName(ws memdb.WatchSet, name string) (*structs.ACLPolicy, error) {
	return aclOne[structs.ACLPolicy](snap, ws, TableACLPolicies, indexID, name)
}

// ACLTokens lists every token by accessor ID.
func (snap *Snapshot) ACLTokens(ws memdb.WatchSet) ([]*structs.ACLToken, error) {
	return aclAll[structs.ACLToken](snap, ws, TableACLTokens)
}

// ACLTokenByAccessor returns one token (nil when missing).
func (snap *Snapshot) ACLTokenByAccessor(ws memdb.WatchSet, accessor string) (*structs.ACLToken, error) {
	return aclOne[structs.ACLToken](snap, ws, TableACLTokens, indexID, accessor)
}

// ACLTokenBySecretHash returns the token whose secret hashes to hash (nil
// when none does).
func (snap *Snapshot) ACLTokenBySecretHash(ws memdb.WatchSet, hash string) (*structs.ACLToken, error) {
	return aclOne[structs.ACLToken](snap, ws, TableACLTokens, indexSecretHash, hash)
}

// ACLBootstrapIndex is the raft index the cluster was bootstrapped at (0:
// not yet).
func (snap *Snapshot) ACLBootstrapIndex() (uint64, error) {
	row, err := aclOne[aclBootstrapRow](snap, nil, TableACLBootstrap, indexID, bootstrapKey)
	if err != nil || row == nil {
		return 0, err
	}
	return row.Index, nil
}

// ACLTokenBySecretHash reads the current state (host/acl's token lookup).
func (s *Store) ACLTokenBySecretHash(hash string) (*structs.ACLToken, error) {
	return s.Snapshot().ACLTokenBySecretHash(nil, hash)
}

// ACLPolicyByName reads the current state.
func (s *Store) ACLPolicyByName(name string) (*structs.ACLPolicy, error) {
	return s.Snapshot().ACLPolicyByName(nil, name)
}

// ACLPoliciesIndex is the raft index of the last policy write: a compiled
// ACL cached before it is stale after it.
func (s *Store) ACLPoliciesIndex() (uint64, error) {
	return s.Snapshot().Index(TableACLPolicies)
}

func aclAll[T any](snap *Snapshot, ws memdb.WatchSet, table string) ([]*T, error) {
	it, err := snap.txn.Get(table, indexID)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", table, err)
	}
	watch(ws, it.WatchCh())
	var out []*T
	for raw := it.Next(); raw != nil; raw = it.Next() {
		out = append(out, raw.(*T))
	}
	return out, nil
}

func aclOne[T any](snap *Snapshot, ws memdb.WatchSet, table, index, key string) (*T, error) {
	ch, raw, err := snap.txn.FirstWatch(table, index, key)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", table, err)
	}
	watch(ws, ch)
	if raw == nil {
		return nil, nil
	}
	return raw.(*T), nil
}

// ACLPolicies lists the policies of the current state.
func (s *Store) ACLPolicies() ([]*structs.ACLPolicy, error) { return s.Snapshot().ACLPolicies(nil) }

// ACLTokens lists the tokens of the current state.
func (s *Store) ACLTokens() ([]*structs.ACLToken, error) { return s.Snapshot().ACLTokens(nil) }

// ACLTokenByAccessor reads one token of the current state.
func (s *Store) ACLTokenByAccessor(accessor string) (*structs.ACLToken, error) {
	return s.Snapshot().ACLTokenByAccessor(nil, accessor)
}

// ACLWatch adds to ws what changes the identity of the token whose secret
// hashes to hash: its own row, every policy, and a restore of the whole
// state (acl.Watcher: open streams see a revocation at once).
func (s *Store) ACLWatch(ws memdb.WatchSet, hash string) error {
	snap := s.Snapshot()
	watch(ws, snap.abandon)
	if _, err := snap.ACLTokenBySecretHash(ws, hash); err != nil {
		return err
	}
	_, err := snap.ACLPolicies(ws)
	return err
}
