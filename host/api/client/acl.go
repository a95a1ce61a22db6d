package client

import (
	"context"
	"net/http"

	"github.com/volhost/volhost/host/api"
	"github.com/volhost/volhost/host/structs"
)

// ACLBootstrap creates the cluster's first management token (once).
func (c *Client) ACLBootstrap(ctx context.Context) (*api.ACLTokenSecret, error) {
	var out api.ACLTokenSecret
	_, err := c.do(ctx, http.MethodPost, "/v1/acl/bootstrap", nil, nil, &out)
	return &out, err
}

// ACLPolicies lists the policies.
func (c *Client) ACLPolicies(ctx context.Context) ([]api.ACLPolicyStub, error) {
	var out []api.ACLPolicyStub
	_, err := c.do(ctx, http.MethodGet, "/v1/acl/policies", nil, nil, &out)
	return out, err
}

// ACLPolicy returns one policy with its rules.
func (c *Client) ACLPolicy(ctx context.Context, name string) (*structs.ACLPolicy, error) {
	var out structs.ACLPolicy
	_, err := c.do(ctx, http.MethodGet, "/v1/acl/policy/"+seg(name), nil, nil, &out)
	return &out, err
}

// ACLPolicyApply creates or replaces a policy.
func (c *Client) ACLPolicyApply(ctx context.Context, name, description, rules string) (uint64, error) {
	var out api.IndexResponse
	_, err := c.do(ctx, http.MethodPut, "/v1/acl/policy/"+seg(name), nil, api.ACLPolicyRequest{Description: description, Rules: rules}, &out)
	return out.Index, err
}

// ACLPolicyDelete removes a policy.
func (c *Client) ACLPolicyDelete(ctx context.Context, name string) (uint64, error) {
	var out api.IndexResponse
	_, err := c.do(ctx, http.MethodDelete, "/v1/acl/policy/"+seg(name), nil, nil, &out)
	return out.Index, err
}

// ACLTokens lists the tokens (never their secrets).
func (c *Client) ACLTokens(ctx context.Context) ([]api.ACLTokenView, error) {
	var out []api.ACLTokenView
	_, err := c.do(ctx, http.MethodGet, "/v1/acl/tokens", nil, nil, &out)
	return out, err
}

// ACLTokenCreate creates a token; the answer holds its secret, shown once.
func (c *Client) ACLTokenCreate(ctx context.Context, req api.ACLTokenRequest) (*api.ACLTokenSecret, error) {
	var out api.ACLTokenSecret
	_, err := c.do(ctx, http.MethodPut, "/v1/acl/token", nil, req, &out)
	return &out, err
}

// ACLToken returns one token by accessor ID.
func (c *Client) ACLToken(ctx context.Context, accessor string) (*api.ACLTokenView, error) {
	var out api.ACLTokenView
	_, err := c.do(ctx, http.MethodGet, "/v1/acl/token/"+seg(accessor), nil, nil, &out)
	return &out, err
}

// ACLTokenSelf returns the token the client uses.
func (c *Client) ACLTokenSelf(ctx context.Context) (*api.ACLTokenView, error) {
	var out api.ACLTokenView
	_, err := c.do(ctx, http.MethodGet, "/v1/acl/token/self", nil, nil, &out)
	return &out, err
}

// ACLTokenDelete revokes a token.
func (c *Client) ACLTokenDelete(ctx context.Context, accessor string) (uint64, error) {
	var out api.IndexResponse
	_, err := c.do(ctx, http.MethodDelete, "/v1/acl/token/"+seg(accessor), nil, nil, &out)
	return out.Index, err
}
