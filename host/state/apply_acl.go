package state

import (
	"fmt"
	"strings"

	"github.com/volhost/volhost/host/structs"
)

// The ACL message types register themselves with the dispatch table, so
// the ACL feature lives in its own files.
func init() {
	ops[structs.ACLBootstrapType] = mkOp(validateACLBootstrap, (*writer).aclBootstrap)
	ops[structs.ACLPolicyUpsertType] = mkOp(validateACLPolicyUpsert, (*writer).aclPolicyUpsert)
	ops[structs.ACLPolicyDeleteType] = mkOp(validateACLPolicyDelete, (*writer).aclPolicyDelete)
	ops[structs.ACLTokenUpsertType] = mkOp(validateACLTokenUpsert, (*writer).aclTokenUpsert)
	ops[structs.ACLTokenDeleteType] = mkOp(validateACLTokenDelete, (*writer).aclTokenDelete)
}

// validHash checks a secret hash: SHA-256 in lower-case hex. Anything else
// (a clear-text secret by mistake) is refused before it reaches the log.
func validHash(field, h string) error {
	if len(h) != 64 || strings.Trim(h, "0123456789abcdef") != "" {
		return structs.Invalid(field, "must be a SHA-256 in lower-case hex (the secret itself is never stored)")
	}
	return nil
}

func validateToken(snap *Snapshot, f string, t *structs.ACLToken) error {
	if t == nil {
		return structs.Invalid(f, "is null")
	}
	if err := validID(f+".accessor_id", t.AccessorID); err != nil {
		return err
	}
	if err := validHash(f+".secret_hash", t.SecretHash); err != nil {
		return err
	}
	if t.Name != "" && len(t.Name) > 256 {
		return structs.Invalid(f+".name", "is %d bytes long, at most 256 allowed", len(t.Name))
	}
	switch t.Type {
	case structs.ACLManagementToken:
		if len(t.Policies) > 0 {
			return structs.Invalid(f+".policies", "a management token has every capability and takes no policies")
		}
	case structs.ACLClientToken:
		if len(t.Policies) == 0 {
			return structs.Invalid(f+".policies", "a client token needs at least one policy")
		}
		for _, p := range t.Policies {
			got, err := snap.ACLPolicyByName(nil, p)
			if err != nil {
				return err
			}
			if got == nil {
				return structs.NotFound("acl policy", p)
			}
		}
	default:
		return structs.Invalid(f+".type", "must be one of %s, %s, got %q", structs.ACLClientToken, structs.ACLManagementToken, t.Type)
	}
	if old, err := snap.ACLTokenByAccessor(nil, t.AccessorID); err != nil {
		return err
	} else if old != nil {
		return structs.Conflict("acl token %s already exists", t.AccessorID)
	}
	if old, err := snap.ACLTokenBySecretHash(nil, t.SecretHash); err != nil {
		return err
	} else if old != nil {
		return structs.Conflict("acl token secret already in use")
	}
	return nil
}

func validateACLBootstrap(snap *Snapshot, r *structs.ACLBootstrapRequest) error {
	idx, err := snap.ACLBootstrapIndex()
	if err != nil {
		return err
	}
	if idx > 0 {
		return fmt.Errorf("%w: ACL bootstrap already done (at index %d); a second bootstrap is refused", ErrACLBootstrapped, idx)
	}
	if r.Token != nil && r.Token.Type != structs.ACLManagementToken {
		return structs.Invalid("token.type", "the bootstrap token must be a management token")
	}
	return validateToken(snap, "token", r.Token)
}

// ErrACLBootstrapped is a second bootstrap: it wraps structs.ErrConflict.
var ErrACLBootstrapped = structs.Conflict("acl already bootstrapped")

func validateACLPolicyUpsert(_ *Snapshot, r *structs.ACLPolicyUpsertRequest) error {
	return entries("policies", "policy", r.Policies, func(f string, p *structs.ACLPolicy) error {
		if err := validID(f+".name", p.Name); err != nil {
			return err
		}
		if strings.TrimSpace(p.Rules) == "" {
			return structs.Invalid(f+".rules", "must not be empty")
		}
		return nil
	})
}

func validateACLPolicyDelete(snap *Snapshot, r *structs.ACLPolicyDeleteRequest) error {
	if len(r.Names) == 0 {
		return structs.Invalid("names", "at least one policy name is required")
	}
	for _, n := range r.Names {
		if _, err := mustExist(snap.ACLPolicyByName, "acl policy", n); err != nil {
			return err
		}
	}
	return nil
}

func validateACLTokenUpsert(snap *Snapshot, r *structs.ACLTokenUpsertRequest) error {
	if len(r.Tokens) == 0 {
		return structs.Invalid("tokens", "at least one token is required")
	}
	for i, t := range r.Tokens {
		if err := validateToken(snap, fmt.Sprintf("tokens[%d]", i), t); err != nil {
			return err
		}
	}
	return nil
}

func validateACLTokenDelete(snap *Snapshot, r *structs.ACLTokenDeleteRequest) error {
	if len(r.AccessorIDs) == 0 {
		return structs.Invalid("accessor_ids", "at least one accessor ID is required")
	}
	for _, id := range r.AccessorIDs {
		if _, err := mustExist(snap.ACLTokenByAccessor, "acl token", id); err != nil {
			return err
		}
	}
	return nil
}

// audit records a privileged ACL change with the accessor that made it.
func (w *writer) audit(action, accessor, msg string) error {
	if accessor == "" {
		accessor = "anonymous"
	}
	return w.event(&structs.Event{Type: structs.EventAudit, Message: msg,
		Fields: map[string]string{"action": action, "accessor": accessor}})
}

func (w *writer) putToken(in *structs.ACLToken) error {
	t := in.Copy()
	t.CreateIndex, t.ModifyIndex = w.index, w.index
	if t.CreateTime.IsZero() {
		t.CreateTime = w.now
	}
	return w.insert(TableACLTokens, t)
}

func (w *writer) aclBootstrap(r *structs.ACLBootstrapRequest) (any, error) {
	if err := w.putToken(r.Token); err != nil {
		return nil, err
	}
	if err := w.insert(TableACLBootstrap, &aclBootstrapRow{Key: bootstrapKey, Index: w.index}); err != nil {
		return nil, err
	}
	return nil, w.audit("acl-bootstrap", r.Token.AccessorID, "ACL system bootstrapped")
}

func (w *writer) aclPolicyUpsert(r *structs.ACLPolicyUpsertRequest) (any, error) {
	for _, in := range r.Policies {
		p := *in
		old, err := w.snap.ACLPolicyByName(nil, p.Name)
		if err != nil {
			return nil, err
		}
		p.CreateIndex, p.ModifyIndex = w.index, w.index
		if old != nil {
			p.CreateIndex = old.CreateIndex
		}
		if err := w.insert(TableACLPolicies, &p); err != nil {
			return nil, err
		}
		if err := w.audit("acl-policy-upsert", r.Actor, "ACL policy "+p.Name+" applied"); err != nil {
			return nil, err
		}
	}
	return nil, nil
}

func (w *writer) aclPolicyDelete(r *structs.ACLPolicyDeleteRequest) (any, error) {
	for _, n := range r.Names {
		p, err := w.snap.ACLPolicyByName(nil, n)
		if err != nil {
			return nil, err
		}
		if err := w.delete(TableACLPolicies, p); err != nil {
			return nil, err
		}
		if err := w.audit("acl-policy-delete", r.Actor, "ACL policy "+n+" deleted"); err != nil {
			return nil, err
		}
	}
	return nil, nil
}

func (w *writer) aclTokenUpsert(r *structs.ACLTokenUpsertRequest) (any, error) {
	for _, t := range r.Tokens {
		if err := w.putToken(t); err != nil {
			return nil, err
		}
		if err := w.audit("acl-token-create", r.Actor, "ACL token "+t.AccessorID+" created"); err != nil {
			return nil, err
		}
	}
	return nil, nil
}

func (w *writer) aclTokenDelete(r *structs.ACLTokenDeleteRequest) (any, error) {
	for _, id := range r.AccessorIDs {
		t, err := w.snap.ACLTokenByAccessor(nil, id)
		if err != nil {
			return nil, err
		}
		if err := w.delete(TableACLTokens, t); err != nil {
			return nil, err
		}
		if err := w.audit("acl-token-delete", r.Actor, "ACL token "+id+" deleted"); err != nil {
			return nil, err
		}
	}
	return nil, nil
}
