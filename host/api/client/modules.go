package client

import (
	"context"
	"net/http"

	"github.com/volhost/volhost/host/api"
	"github.com/volhost/volhost/plugins"
)

// Modules lists the Wasm modules of the agent asked (modules are per server).
func (c *Client) Modules(ctx context.Context) ([]plugins.Status, error) {
	var out api.ModulesResponse
	_, err := c.do(ctx, http.MethodGet, "/v1/modules", nil, nil, &out)
	return out.Modules, err
}

// Module returns one module's status and what it serves.
func (c *Client) Module(ctx context.Context, name string) (*api.ModuleInfo, error) {
	var out api.ModuleInfo
	if _, err := c.do(ctx, http.MethodGet, "/v1/module/"+seg(name), nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ReloadModules rescans the agent's module directory now.
func (c *Client) ReloadModules(ctx context.Context) ([]plugins.Status, error) {
	var out api.ModulesResponse
	_, err := c.do(ctx, http.MethodPut, "/v1/modules/reload", nil, nil, &out)
	return out.Modules, err
}
