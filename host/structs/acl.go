package structs

import (
	"errors"
	"time"
)

// ErrPermissionDenied is a request the ACL system refused (HTTP 403).
var ErrPermissionDenied = errors.New("permission denied")

// ACL message types (reserved range 30-49, see requests.go).
const (
	ACLBootstrapType    MessageType = 30 // the first management token, once per cluster
	ACLPolicyUpsertType MessageType = 31
	ACLPolicyDeleteType MessageType = 32
	ACLTokenUpsertType  MessageType = 33
	ACLTokenDeleteType  MessageType = 34
)

// ACL token types.
const (
	ACLManagementToken = "management" // every capability; no policies
	ACLClientToken     = "client"     // the union of its policies
)

// AnonymousPolicy is the policy name that governs requests without a token.
const AnonymousPolicy = "anonymous"

// AnonymousAccessor stands, with ACLs on, for a request that carried no
// token: what audit events record, and what the API and the node RPC hand
// host/server as the registering accessor, which it turns into
// NodeUpsertRequest.Anonymous (never a stored RegisteredBy).
const AnonymousAccessor = "anonymous"

// ACLPolicy is a named set of rules in HCL (host/acl parses them).
type ACLPolicy struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	Rules       string `json:"rules"`
	CreateIndex uint64 `json:"create_index"`
	ModifyIndex uint64 `json:"modify_index"`
}

// ACLToken is a token as the state store keeps it: the secret itself is
// never stored, only its SHA-256 (hex). API answers use a view without the
// hash; the hash is in the struct's JSON because raft snapshots persist it.
type ACLToken struct {
	AccessorID string    `json:"accessor_id"`
	SecretHash string    `json:"secret_hash"`
	Name       string    `json:"name"`
	Type       string    `json:"type"`
	Policies   []string  `json:"policies,omitempty"`
	CreateTime time.Time `json:"create_time"`
	// ExpirationTime is zero for a token that never expires.
	ExpirationTime time.Time `json:"expiration_time,omitempty"`
	CreateIndex    uint64    `json:"create_index"`
	ModifyIndex    uint64    `json:"modify_index"`
}

// Management reports whether t is a management token.
func (t *ACLToken) Management() bool { return t.Type == ACLManagementToken }

// Expired reports whether t has expired at now.
func (t *ACLToken) Expired(now time.Time) bool {
	return !t.ExpirationTime.IsZero() && !now.Before(t.ExpirationTime)
}

// Copy returns a deep copy.
func (t *ACLToken) Copy() *ACLToken {
	c := *t
	c.Policies = append([]string(nil), t.Policies...)
	return &c
}

// ACLBootstrapRequest creates the first management token. The store refuses
// a second one (ErrConflict) for the life of the cluster's state.
type ACLBootstrapRequest struct {
	Token *ACLToken `json:"token"`
}

// ACLPolicyUpsertRequest creates or replaces policies. Actor is the
// accessor ID of the token that asked, recorded in the audit event.
type ACLPolicyUpsertRequest struct {
	Policies []*ACLPolicy `json:"policies"`
	Actor    string       `json:"actor"`
}

// ACLPolicyDeleteRequest removes policies by name.
type ACLPolicyDeleteRequest struct {
	Names []string `json:"names"`
	Actor string   `json:"actor"`
}

// ACLTokenUpsertRequest creates tokens (secret hashes only).
type ACLTokenUpsertRequest struct {
	Tokens []*ACLToken `json:"tokens"`
	Actor  string      `json:"actor"`
}

// ACLTokenDeleteRequest revokes tokens by accessor ID.
type ACLTokenDeleteRequest struct {
	AccessorIDs []string `json:"accessor_ids"`
	Actor       string   `json:"actor"`
}

// IsACLWrite reports whether t changes the ACL state (policies, tokens,
// the bootstrap mark).
func IsACLWrite(t MessageType) bool { return NewACLRequest(t) != nil }

// NewACLRequest returns a pointer to the request type of an ACL message
// type, or nil for any other type (the log codec asks it).
func NewACLRequest(t MessageType) any {
	switch t {
	case ACLBootstrapType:
		return &ACLBootstrapRequest{}
	case ACLPolicyUpsertType:
		return &ACLPolicyUpsertRequest{}
	case ACLPolicyDeleteType:
		return &ACLPolicyDeleteRequest{}
	case ACLTokenUpsertType:
		return &ACLTokenUpsertRequest{}
	case ACLTokenDeleteType:
		return &ACLTokenDeleteRequest{}
	}
	return nil
}
