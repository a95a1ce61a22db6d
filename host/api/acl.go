package api

import (
	"context"
	"net/http"
	"time"

	"github.com/volhost/volhost/host/acl"
	"github.com/volhost/volhost/host/structs"
)

// ACL routes (EnableACL; management tokens only unless said otherwise):
//
//	POST   /v1/acl/bootstrap            -> ACLTokenSecret (open; once per cluster, then 409)
//	GET    /v1/acl/policies             -> [ACLPolicyStub]
//	GET    /v1/acl/policy/NAME          -> structs.ACLPolicy
//	PUT    /v1/acl/policy/NAME          ACLPolicyRequest -> {"index"}
//	DELETE /v1/acl/policy/NAME          -> {"index"}
//	GET    /v1/acl/tokens               -> [ACLTokenView]
//	PUT    /v1/acl/token                ACLTokenRequest -> ACLTokenSecret
//	GET    /v1/acl/token/self           -> ACLTokenView (any valid token, or anonymous)
//	GET    /v1/acl/token/ACCESSOR       -> ACLTokenView
//	DELETE /v1/acl/token/ACCESSOR       -> {"index"}

// ACLService is the ACL system the routes use. *acl.Service implements it.
type ACLService interface {
	Resolver
	Bootstrap(ctx context.Context) (*structs.ACLToken, string, error)
	UpsertPolicy(ctx context.Context, actor string, p *structs.ACLPolicy) (uint64, error)
	DeletePolicy(ctx context.Context, actor, name string) (uint64, error)
	CreateToken(ctx context.Context, actor string, nt acl.NewToken) (*structs.ACLToken, string, error)
	DeleteToken(ctx context.Context, actor, accessor string) (uint64, error)
	Policies() ([]*structs.ACLPolicy, error)
	Policy(name string) (*structs.ACLPolicy, error)
	Tokens() ([]*structs.ACLToken, error)
	Token(accessor string) (*structs.ACLToken, error)
}

type (
	// ACLPolicyRequest is the body of PUT /v1/acl/policy/NAME.
	ACLPolicyRequest struct {
		Description string `json:"description"`
		Rules       string `json:"rules"`
	}
	// ACLPolicyStub is a policy in a list (without its rules).
	ACLPolicyStub struct {
		Name        string `json:"name"`
		Description string `json:"description,omitempty"`
		CreateIndex uint64 `json:"create_index"`
		ModifyIndex uint64 `json:"modify_index"`
	}
	// ACLTokenRequest is the body of PUT /v1/acl/token.
	ACLTokenRequest struct {
		Name     string   `json:"name"`
		Type     string   `json:"type"`
		Policies []string `json:"policies"`
		// TTL is a Go duration ("24h"); empty: the token never expires.
		TTL string `json:"ttl,omitempty"`
	}
	// ACLTokenView is a token as the API shows it: never its secret or
	// the secret's hash.
	ACLTokenView struct {
		AccessorID     string     `json:"accessor_id"`
		Name           string     `json:"name"`
		Type           string     `json:"type"`
		Policies       []string   `json:"policies"`
		CreateTime     time.Time  `json:"create_time"`
		ExpirationTime *time.Time `json:"expiration_time,omitempty"`
		CreateIndex    uint64     `json:"create_index"`
		ModifyIndex    uint64     `json:"modify_index"`
	}
	// ACLTokenSecret answers a bootstrap or token creation: the only time
	// the secret is shown.
	ACLTokenSecret struct {
		ACLTokenView
		SecretID string `json:"secret_id"`
	}
)

// TokenView renders t without its hash.
func TokenView(t *structs.ACLToken) ACLTokenView {
	v := ACLTokenView{AccessorID: t.AccessorID, Name: t.Name, Type: t.Type, Policies: t.Policies,
		CreateTime: t.CreateTime, CreateIndex: t.CreateIndex, ModifyIndex: t.ModifyIndex}
	if v.Policies == nil {
		v.Policies = []string{}
	}
	if !t.ExpirationTime.IsZero() {
		e := t.ExpirationTime
		v.ExpirationTime = &e
	}
	return v
}

func (s *Server) aclRoutes() {
	m := s.mux
	m.HandleFunc("POST /v1/acl/bootstrap", s.aclBootstrap)
	m.HandleFunc("PUT /v1/acl/bootstrap", s.aclBootstrap)
	m.HandleFunc("GET /v1/acl/policies", s.aclPolicies)
	m.HandleFunc("GET /v1/acl/policy/{name}", s.aclPolicy)
	m.HandleFunc("PUT /v1/acl/policy/{name}", s.aclPolicyUpsert)
	m.HandleFunc("POST /v1/acl/policy/{name}", s.aclPolicyUpsert)
	m.HandleFunc("DELETE /v1/acl/policy/{name}", s.aclPolicyDelete)
	m.HandleFunc("GET /v1/acl/tokens", s.aclTokens)
	m.HandleFunc("PUT /v1/acl/token", s.aclTokenCreate)
	m.HandleFunc("POST /v1/acl/token", s.aclTokenCreate)
	m.HandleFunc("GET /v1/acl/token/self", s.aclTokenSelf)
	m.HandleFunc("GET /v1/acl/token/{id}", s.aclToken)
	m.HandleFunc("DELETE /v1/acl/token/{id}", s.aclTokenDelete)
}

func (s *Server) aclSvc() ACLService { return s.auth.cfg.Service }

func (s *Server) aclBootstrap(w http.ResponseWriter, r *http.Request) {
	t, secret, err := s.aclSvc().Bootstrap(r.Context())
	if err != nil {
		WriteError(w, err)
		return
	}
	WriteJSON(w, http.StatusOK, ACLTokenSecret{ACLTokenView: TokenView(t), SecretID: secret})
}

func (s *Server) aclPolicies(w http.ResponseWriter, _ *http.Request) {
	ps, err := s.aclSvc().Policies()
	if err != nil {
		WriteError(w, err)
		return
	}
	out := make([]ACLPolicyStub, 0, len(ps))
	for _, p := range ps {
		out = append(out, ACLPolicyStub{Name: p.Name, Description: p.Description, CreateIndex: p.CreateIndex, ModifyIndex: p.ModifyIndex})
	}
	WriteJSON(w, http.StatusOK, out)
}

func (s *Server) aclPolicy(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if err := ValidateID("name", name); err != nil {
		WriteError(w, err)
		return
	}
	p, err := s.aclSvc().Policy(name)
	if err != nil {
		WriteError(w, err)
		return
	}
	WriteJSON(w, http.StatusOK, p)
}

func (s *Server) aclPolicyUpsert(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if err := ValidateID("name", name); err != nil {
		WriteError(w, err)
		return
	}
	var req ACLPolicyRequest
	if err := s.decodeBody(w, r, &req); err != nil {
		WriteError(w, err)
		return
	}
	idx, err := s.aclSvc().UpsertPolicy(r.Context(), identityOf(r).Accessor(),
		&structs.ACLPolicy{Name: name, Description: req.Description, Rules: req.Rules})
	s.answerIndex(w, idx, err)
}

func (s *Server) aclPolicyDelete(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if err := ValidateID("name", name); err != nil {
		WriteError(w, err)
		return
	}
	idx, err := s.aclSvc().DeletePolicy(r.Context(), identityOf(r).Accessor(), name)
	s.answerIndex(w, idx, err)
}

func (s *Server) aclTokens(w http.ResponseWriter, _ *http.Request) {
	ts, err := s.aclSvc().Tokens()
	if err != nil {
		WriteError(w, err)
		return
	}
	out := make([]ACLTokenView, 0, len(ts))
	for _, t := range ts {
		out = append(out, TokenView(t))
	}
	WriteJSON(w, http.StatusOK, out)
}

func (s *Server) aclTokenCreate(w http.ResponseWriter, r *http.Request) {
	var req ACLTokenRequest
	if err := s.decodeBody(w, r, &req); err != nil {
		WriteError(w, err)
		return
	}
	nt := acl.NewToken{Name: req.Name, Type: req.Type, Policies: req.Policies}
	if req.TTL != "" {
		d, err := time.ParseDuration(req.TTL)
		if err != nil || d <= 0 {
			WriteError(w, badRequest("ttl", "not a positive duration (e.g. 1h, 30m): %q", req.TTL))
			return
		}
		nt.TTL = d
	}
	t, secret, err := s.aclSvc().CreateToken(r.Context(), identityOf(r).Accessor(), nt)
	if err != nil {
		WriteError(w, err)
		return
	}
	WriteJSON(w, http.StatusOK, ACLTokenSecret{ACLTokenView: TokenView(t), SecretID: secret})
}

func (s *Server) aclTokenSelf(w http.ResponseWriter, r *http.Request) {
	id := identityOf(r)
	if id == nil || id.Token == nil {
		WriteJSON(w, http.StatusOK, ACLTokenView{AccessorID: "anonymous", Name: "Anonymous Token",
			Type: structs.ACLClientToken, Policies: []string{structs.AnonymousPolicy}})
		return
	}
	WriteJSON(w, http.StatusOK, TokenView(id.Token))
}

func (s *Server) aclToken(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := ValidateID("accessor_id", id); err != nil {
		WriteError(w, err)
		return
	}
	t, err := s.aclSvc().Token(id)
	if err != nil {
		WriteError(w, err)
		return
	}
	WriteJSON(w, http.StatusOK, TokenView(t))
}

func (s *Server) aclTokenDelete(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := ValidateID("accessor_id", id); err != nil {
		WriteError(w, err)
		return
	}
	idx, err := s.aclSvc().DeleteToken(r.Context(), identityOf(r).Accessor(), id)
	s.answerIndex(w, idx, err)
}
