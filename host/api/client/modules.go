package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"github.com/volhost/volhost/host/api"
	"github.com/volhost/volhost/plugins"
	"github.com/volhost/volhost/plugins/kit"
)

// Modules lists the Wasm modules of the agent asked (modules are per server).
func (c *Client) Modules(ctx context.Context) ([]plugins.Status, error) {
	var out api.ModulesResponse
	_, err := c.do(ctx, http.MethodGet, "/v1/modules", nil, nil, &out)
	return out.Modules, err
}

// Module returns one module's status and what it serves.
func (c *Client) Module(ctx context.Context, name string) (*api.ModuleInfo, error) {
	return c.ModuleServing(ctx, name, 0)
}

// ModuleServing is Module listing at most perPage of the served volumes
// (0: the server's max_per_page); ServedVolumeCount counts them all.
func (c *Client) ModuleServing(ctx context.Context, name string, perPage int) (*api.ModuleInfo, error) {
	var out api.ModuleInfo
	var q url.Values
	if perPage > 0 {
		q = url.Values{"per_page": {strconv.Itoa(perPage)}}
	}
	if _, err := c.do(ctx, http.MethodGet, "/v1/module/"+seg(name), q, nil, &out); err != nil {
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

// ModuleView records the views the watcher would hand volume ns/id's
// modules now (step "" for the policy's; a CSI step and an allocation ID
// for the adapter's), secrets redacted.
func (c *Client) ModuleView(ctx context.Context, ns, id, step, allocID string) (*kit.Recording, error) {
	q := url.Values{}
	if ns != "" {
		q.Set("namespace", ns)
	}
	if step != "" {
		q.Set("step", step)
	}
	if allocID != "" {
		q.Set("alloc", allocID)
	}
	var out kit.Recording
	if _, err := c.do(ctx, http.MethodGet, "/v1/volume/"+seg(id)+"/module-view", q, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// PromoteModule makes a module's shadow candidate serve on the agent asked;
// one that changes which volumes the module judges only with
// opts.AllowSelectionChange.
func (c *Client) PromoteModule(ctx context.Context, name string, opts plugins.PromoteOptions) (*plugins.Status, error) {
	var q url.Values
	if opts.AllowSelectionChange {
		q = url.Values{"allow_selection_change": {"true"}}
	}
	var out plugins.Status
	if _, err := c.do(ctx, http.MethodPut, "/v1/module/"+seg(name)+"/promote", q, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// RollbackModule returns a module to its last known good generation.
func (c *Client) RollbackModule(ctx context.Context, name string) (*plugins.Status, error) {
	var out plugins.Status
	if _, err := c.do(ctx, http.MethodPut, "/v1/module/"+seg(name)+"/rollback", nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DiscardShadow drops a module's shadow candidate on the agent asked.
func (c *Client) DiscardShadow(ctx context.Context, name string) (*plugins.Status, error) {
	var out plugins.Status
	if _, err := c.do(ctx, http.MethodDelete, "/v1/module/"+seg(name)+"/shadow", nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ShadowModule uploads wasm (and optionally its manifest) as a module's
// shadow candidate.
func (c *Client) ShadowModule(ctx context.Context, name string, wasm []byte, manifest *string) (*plugins.Status, error) {
	var out plugins.Status
	if _, err := c.do(ctx, http.MethodPut, "/v1/module/"+seg(name)+"/shadow", nil, api.ShadowUpload{Wasm: wasm, Manifest: manifest}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
