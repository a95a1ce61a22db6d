// Package client is the Go client of volhost's HTTP API, used by the
// operator CLI and by tests. Errors the server answers come back as
// *APIError, which unwraps to the structs sentinel errors (ErrNotFound,
// ErrConflict, ErrNoLeader) so callers branch with errors.Is, never on text.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/volhost/volhost/host/api"
	"github.com/volhost/volhost/host/structs"
)

// DefaultAddress is where the CLI looks for the agent.
const DefaultAddress = "http://127.0.0.1:4747"

// EnvAddress names the environment variable holding the agent address.
const EnvAddress = "VOLHOST_ADDR"

// maxErrorBody bounds how much of an error answer is read.
const maxErrorBody = 64 << 10

// Client talks to one volhost agent.
type Client struct {
	base      *url.URL
	hc        *http.Client
	token     string
	onWarning func(string)
}

// OnWarning makes the client hand each Warning header of an answer (the
// request succeeded, but something deserves the operator's eye, e.g. a
// plugin that would skip ControllerUnpublish) to fn; the CLI prints them.
func (c *Client) OnWarning(fn func(msg string)) { c.onWarning = fn }

// warningText is the message of a "299 volhost \"...\"" Warning header, or
// the header itself when it has another shape.
func warningText(h string) string {
	parts := strings.SplitN(h, " ", 3)
	if len(parts) == 3 {
		if m, err := strconv.Unquote(parts[2]); err == nil {
			return m
		}
	}
	return h
}

// SetToken makes every request carry the ACL secret (X-Volhost-Token).
func (c *Client) SetToken(secret string) { c.token = secret }

// Authorize adds the client's token to a request built outside Client.
func (c *Client) Authorize(req *http.Request) {
	if c.token != "" {
		req.Header.Set(api.TokenHeader, c.token)
	}
}

// HTTPClient is the http.Client requests go through (TLS settings included).
func (c *Client) HTTPClient() *http.Client { return c.hc }

// New returns a client for address ("host:port" or an http(s) URL). hc may
// be nil for http.DefaultClient.
func New(address string, hc *http.Client) (*Client, error) {
	if address == "" {
		address = DefaultAddress
	}
	if !strings.Contains(address, "://") {
		address = "http://" + address
	}
	u, err := url.Parse(address)
	if err != nil {
		return nil, fmt.Errorf("invalid address %q: %w", address, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("invalid address %q: scheme must be http or https", address)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("invalid address %q: no host", address)
	}
	if hc == nil {
		hc = http.DefaultClient
	}
	return &Client{base: u, hc: sameHostRedirects(hc)}, nil
}

// sameHostRedirects is hc (copied, never changed: it may be shared, as
// http.DefaultClient is) following redirects only to the host and scheme
// the request went to. Go's client copies every header but Authorization
// and Cookie onto a redirect, to any host and from https to http: the
// token (X-Volhost-Token) would go wherever whatever answers at the
// address (a proxy, a load balancer) points it. An agent never redirects
// to another host; a redirect there is an error.
func sameHostRedirects(hc *http.Client) *http.Client {
	c := *hc
	next := hc.CheckRedirect
	c.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if first := via[0].URL; req.URL.Host != first.Host || req.URL.Scheme != first.Scheme {
			return fmt.Errorf("refusing to follow a redirect from %s://%s to %s://%s: the request carries the ACL token",
				first.Scheme, first.Host, req.URL.Scheme, req.URL.Host)
		}
		if next != nil {
			return next(req, via)
		}
		if len(via) >= 10 {
			return errors.New("stopped after 10 redirects")
		}
		return nil
	}
	return &c
}

// Address is the agent's base URL.
func (c *Client) Address() string { return c.base.String() }

// APIError is an error the server answered.
type APIError struct {
	StatusCode int
	Message    string
	Field      string // the offending field of a 400, when known
	Code       string // the gRPC code name when a CSI plugin failed
}

func (e *APIError) Error() string {
	return e.Message
}

// Unwrap maps the status back to the sentinel the server mapped from.
func (e *APIError) Unwrap() error {
	switch e.StatusCode {
	case http.StatusNotFound:
		return structs.ErrNotFound
	case http.StatusConflict:
		return structs.ErrConflict
	case http.StatusServiceUnavailable:
		return structs.ErrNoLeader
	case http.StatusForbidden:
		return structs.ErrPermissionDenied
	}
	return nil
}

// QueryOptions are the blocking-query parameters of a read.
type QueryOptions struct {
	// Index blocks until the answer reflects an index above it (0: no blocking).
	Index uint64
	// Wait bounds the block (server default 5m, capped at 10m).
	Wait time.Duration
	// PerPage is the page size lists are fetched in (0: the server's
	// maximum). List methods follow every page.
	PerPage int
}

// QueryMeta is what a read reports beside its answer.
type QueryMeta struct {
	// Index is the X-Volhost-Index of the answer; pass it back as
	// QueryOptions.Index to wait for the next change.
	Index uint64
	// NextToken is the X-Volhost-NextToken of the last page read ("" once
	// every page was read).
	NextToken string
}

// list reads every page of a list route. Only the first page blocks (with
// o's index): the rest are read at once, so a walk over a large list is
// one consistent-enough pass, as with Nomad's paginated lists.
func list[T any](c *Client, ctx context.Context, path string, q url.Values, o *QueryOptions) ([]T, QueryMeta, error) {
	q = blocking(q, o)
	if o != nil && o.PerPage > 0 {
		q.Set("per_page", strconv.Itoa(o.PerPage))
	}
	var all []T
	var first QueryMeta
	for page := 0; ; page++ {
		var out []T
		meta, err := c.do(ctx, http.MethodGet, path, q, nil, &out)
		if err != nil {
			return nil, meta, err
		}
		if page == 0 {
			// The rest answer at once; ?index= stays, since on the events
			// route it also filters.
			first = meta
			q.Set("wait", "0s")
		}
		all = append(all, out...)
		if meta.NextToken == "" {
			return all, first, nil
		}
		q.Set("next_token", meta.NextToken)
	}
}

// url joins the base URL and an already-escaped path (IDs go through
// url.PathEscape, so an ID holding "/" stays one path segment).
func (c *Client) url(escapedPath string, q url.Values) string {
	u := *c.base
	base := strings.TrimSuffix(u.Path, "/")
	if p, err := url.PathUnescape(escapedPath); err == nil {
		u.Path = base + p
		u.RawPath = base + escapedPath
	} else {
		u.Path = base + escapedPath
		u.RawPath = ""
	}
	u.RawQuery = q.Encode()
	return u.String()
}

func (c *Client) do(ctx context.Context, method, path string, q url.Values, body, out any) (QueryMeta, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return QueryMeta{}, fmt.Errorf("encode request: %w", err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.url(path, q), rd)
	if err != nil {
		return QueryMeta{}, fmt.Errorf("build request: %w", err)
	}
	// Every PUT and POST says JSON, with or without a body: the API refuses
	// writes of any other type (its CSRF guard).
	if body != nil || method == http.MethodPut || method == http.MethodPost {
		req.Header.Set("Content-Type", "application/json")
	}
	c.Authorize(req)
	resp, err := c.hc.Do(req)
	if err != nil {
		return QueryMeta{}, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	var meta QueryMeta
	if v := resp.Header.Get(api.IndexHeader); v != "" {
		meta.Index, _ = strconv.ParseUint(v, 10, 64)
	}
	meta.NextToken = resp.Header.Get(api.NextTokenHeader)
	if c.onWarning != nil {
		for _, h := range resp.Header.Values("Warning") {
			c.onWarning(warningText(h))
		}
	}
	if resp.StatusCode/100 != 2 {
		return meta, decodeError(resp)
	}
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return meta, nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return meta, fmt.Errorf("%s %s: decode answer: %w", method, path, err)
	}
	return meta, nil
}

func decodeError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	var er api.ErrorResponse
	if err := json.Unmarshal(b, &er); err != nil || er.Error == "" {
		msg := strings.TrimSpace(string(b))
		if msg == "" {
			msg = resp.Status
		}
		return &APIError{StatusCode: resp.StatusCode, Message: msg}
	}
	return &APIError{StatusCode: resp.StatusCode, Message: er.Error, Field: er.Field, Code: er.Code}
}

func blocking(q url.Values, o *QueryOptions) url.Values {
	if q == nil {
		q = url.Values{}
	}
	if o != nil {
		if o.Index > 0 {
			q.Set("index", strconv.FormatUint(o.Index, 10))
		}
		if o.Wait > 0 {
			q.Set("wait", o.Wait.String())
		}
	}
	return q
}

func nsQuery(ns string) url.Values {
	q := url.Values{}
	if ns != "" {
		q.Set("namespace", ns)
	}
	return q
}

func seg(id string) string { return url.PathEscape(id) }

// Volumes lists volumes, optionally filtered by namespace and plugin ("" for all).
func (c *Client) Volumes(ctx context.Context, namespace, pluginID string, o *QueryOptions) ([]*structs.Volume, QueryMeta, error) {
	return c.VolumesWhere(ctx, VolumeQuery{Namespace: namespace, PluginID: pluginID}, o)
}

// VolumeQuery filters a volume list; a zero field matches all.
type VolumeQuery struct {
	Namespace, PluginID string
	// ClaimState: volumes with a claim in this state, or "unclaimed".
	ClaimState string
	// Stuck: only stuck volumes (true) or only the others (false).
	Stuck  *bool
	Search string
}

// VolumesWhere lists the volumes matching vq (GET /v1/volumes with its
// filters: namespace, plugin_id, claim_state, stuck, search).
func (c *Client) VolumesWhere(ctx context.Context, vq VolumeQuery, o *QueryOptions) ([]*structs.Volume, QueryMeta, error) {
	q := url.Values{}
	for k, v := range map[string]string{"namespace": vq.Namespace, "plugin_id": vq.PluginID,
		"claim_state": vq.ClaimState, "search": vq.Search} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if vq.Stuck != nil {
		q.Set("stuck", strconv.FormatBool(*vq.Stuck))
	}
	return list[*structs.Volume](c, ctx, "/v1/volumes", q, o)
}

// Volume reads one volume with its force-deregister check.
func (c *Client) Volume(ctx context.Context, namespace, id string, o *QueryOptions) (*api.VolumeResponse, QueryMeta, error) {
	var out api.VolumeResponse
	meta, err := c.do(ctx, http.MethodGet, "/v1/volume/"+seg(id), blocking(nsQuery(namespace), o), nil, &out)
	if err != nil {
		return nil, meta, err
	}
	return &out, meta, nil
}

// RegisterVolumes registers volumes.
func (c *Client) RegisterVolumes(ctx context.Context, vols []*structs.Volume) (uint64, error) {
	var out api.IndexResponse
	_, err := c.do(ctx, http.MethodPut, "/v1/volumes", nil, &structs.VolumeRegisterRequest{Volumes: vols}, &out)
	return out.Index, err
}

// DeregisterVolume removes a volume; with force it answers the leftovers.
func (c *Client) DeregisterVolume(ctx context.Context, namespace, id string, force bool) (*api.DeregisterResponse, error) {
	q := nsQuery(namespace)
	if force {
		q.Set("force", "true")
	}
	var out api.DeregisterResponse
	if _, err := c.do(ctx, http.MethodDelete, "/v1/volume/"+seg(id), q, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ClaimVolume claims a volume for an allocation.
func (c *Client) ClaimVolume(ctx context.Context, req *structs.ClaimRequest) (*structs.Claim, error) {
	var out structs.Claim
	if _, err := c.do(ctx, http.MethodPut, "/v1/volume/"+seg(req.VolumeID)+"/claim", nsQuery(req.Namespace), req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DetachVolume releases a node's releasable claims on a volume now.
func (c *Client) DetachVolume(ctx context.Context, namespace, id, nodeID string) (*structs.DetachResult, error) {
	q := nsQuery(namespace)
	q.Set("node", nodeID)
	var out structs.DetachResult
	if _, err := c.do(ctx, http.MethodPut, "/v1/volume/"+seg(id)+"/detach", q, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Leftovers lists attachments force-deregistration may have left behind.
func (c *Client) Leftovers(ctx context.Context, o *QueryOptions) ([]*structs.Leftover, QueryMeta, error) {
	return list[*structs.Leftover](c, ctx, "/v1/volumes/leftovers", nil, o)
}

// ClearLeftovers forgets leftovers by ID, or all of them.
func (c *Client) ClearLeftovers(ctx context.Context, ids []string, all bool) (uint64, error) {
	var out api.IndexResponse
	_, err := c.do(ctx, http.MethodDelete, "/v1/volumes/leftovers", nil, &structs.LeftoversClearRequest{IDs: ids, All: all}, &out)
	return out.Index, err
}

// Nodes lists nodes.
func (c *Client) Nodes(ctx context.Context, o *QueryOptions) ([]*structs.Node, QueryMeta, error) {
	return list[*structs.Node](c, ctx, "/v1/nodes", nil, o)
}

// Node reads one node.
func (c *Client) Node(ctx context.Context, id string, o *QueryOptions) (*structs.Node, QueryMeta, error) {
	var out structs.Node
	meta, err := c.do(ctx, http.MethodGet, "/v1/node/"+seg(id), blocking(nil, o), nil, &out)
	if err != nil {
		return nil, meta, err
	}
	return &out, meta, nil
}

// RegisterNode registers a node; the server probes its plugin endpoints.
func (c *Client) RegisterNode(ctx context.Context, n *structs.Node) (*structs.Node, error) {
	var out structs.Node
	if _, err := c.do(ctx, http.MethodPut, "/v1/nodes", nil, &structs.NodeUpsertRequest{Node: n}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// SetNodeStatus marks a node ready or down.
func (c *Client) SetNodeStatus(ctx context.Context, id string, st structs.NodeStatus) (uint64, error) {
	var out api.IndexResponse
	_, err := c.do(ctx, http.MethodPut, "/v1/node/"+seg(id)+"/status", nil, &api.NodeStatusRequest{Status: st}, &out)
	return out.Index, err
}

// FenceNode records that an operator attests node id is off (reason required).
func (c *Client) FenceNode(ctx context.Context, id, reason string) (uint64, error) {
	var out api.IndexResponse
	_, err := c.do(ctx, http.MethodPut, "/v1/node/"+seg(id)+"/fence", nil, &api.NodeFenceRequest{Reason: reason}, &out)
	return out.Index, err
}

// UnfenceNode lifts a node's fence.
func (c *Client) UnfenceNode(ctx context.Context, id string) (uint64, error) {
	var out api.IndexResponse
	_, err := c.do(ctx, http.MethodDelete, "/v1/node/"+seg(id)+"/fence", nil, nil, &out)
	return out.Index, err
}

// DeregisterNode removes a node; force lets it go with claims still on it
// (their node steps are then skipped, listed in the answer).
func (c *Client) DeregisterNode(ctx context.Context, id string, force bool) (*api.NodeDeregisterResponse, error) {
	q := url.Values{}
	if force {
		q.Set("force", "true")
	}
	var out api.NodeDeregisterResponse
	if _, err := c.do(ctx, http.MethodDelete, "/v1/node/"+seg(id), q, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DeregisterPlugin removes a plugin no volume uses.
func (c *Client) DeregisterPlugin(ctx context.Context, id string) (uint64, error) {
	var out api.IndexResponse
	_, err := c.do(ctx, http.MethodDelete, "/v1/plugin/"+seg(id), nil, nil, &out)
	return out.Index, err
}

// Plugins lists CSI plugins.
func (c *Client) Plugins(ctx context.Context, o *QueryOptions) ([]*structs.Plugin, QueryMeta, error) {
	return list[*structs.Plugin](c, ctx, "/v1/plugins", nil, o)
}

// Plugin reads one plugin.
func (c *Client) Plugin(ctx context.Context, id string, o *QueryOptions) (*structs.Plugin, QueryMeta, error) {
	var out structs.Plugin
	meta, err := c.do(ctx, http.MethodGet, "/v1/plugin/"+seg(id), blocking(nil, o), nil, &out)
	if err != nil {
		return nil, meta, err
	}
	return &out, meta, nil
}

// RegisterPlugin registers a plugin; the server probes its controller.
func (c *Client) RegisterPlugin(ctx context.Context, p *structs.Plugin) (*structs.Plugin, error) {
	var out structs.Plugin
	if _, err := c.do(ctx, http.MethodPut, "/v1/plugins", nil, &structs.PluginUpsertRequest{Plugin: p}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Allocs lists allocations, optionally on one node ("" for all), of
// every namespace (which needs read on every namespace).
func (c *Client) Allocs(ctx context.Context, nodeID string, o *QueryOptions) ([]*structs.Alloc, QueryMeta, error) {
	return c.AllocsWhere(ctx, AllocQuery{NodeID: nodeID}, o)
}

// AllocQuery filters an allocation list; a zero field matches all.
type AllocQuery struct {
	Namespace, NodeID string
}

// AllocsWhere lists the allocations matching aq (GET /v1/allocs with
// its filters: namespace, node_id).
func (c *Client) AllocsWhere(ctx context.Context, aq AllocQuery, o *QueryOptions) ([]*structs.Alloc, QueryMeta, error) {
	q := nsQuery(aq.Namespace)
	if aq.NodeID != "" {
		q.Set("node_id", aq.NodeID)
	}
	return list[*structs.Alloc](c, ctx, "/v1/allocs", q, o)
}

// Alloc reads one allocation, in whichever namespace it is.
func (c *Client) Alloc(ctx context.Context, id string, o *QueryOptions) (*structs.Alloc, QueryMeta, error) {
	return c.AllocIn(ctx, "", id, o)
}

// AllocIn reads one allocation of namespace ("": whichever it is in; a
// token that may not read every namespace is then refused an allocation
// that does not exist, rather than told so).
func (c *Client) AllocIn(ctx context.Context, namespace, id string, o *QueryOptions) (*structs.Alloc, QueryMeta, error) {
	var out structs.Alloc
	meta, err := c.do(ctx, http.MethodGet, "/v1/alloc/"+seg(id), blocking(nsQuery(namespace), o), nil, &out)
	if err != nil {
		return nil, meta, err
	}
	return &out, meta, nil
}

// UpsertAllocs registers allocations or updates their client status.
func (c *Client) UpsertAllocs(ctx context.Context, allocs []*structs.Alloc) (uint64, error) {
	var out api.IndexResponse
	_, err := c.do(ctx, http.MethodPut, "/v1/allocs", nil, &structs.AllocUpsertRequest{Allocs: allocs}, &out)
	return out.Index, err
}

// Events lists events after index (all when 0); with o.Index set it waits
// for new ones.
func (c *Client) Events(ctx context.Context, o *QueryOptions) ([]*structs.Event, QueryMeta, error) {
	return c.EventsFiltered(ctx, EventQuery{}, o)
}

// EventQuery filters events (zero fields match all). Namespace is the
// namespace of VolumeID and is refused without it.
type EventQuery struct {
	Namespace, VolumeID string
	Type                string
	After, Before       time.Time
}

// EventsFiltered lists the events q selects, every page of them; with
// o.Index set only events after it, waiting for some.
func (c *Client) EventsFiltered(ctx context.Context, eq EventQuery, o *QueryOptions) ([]*structs.Event, QueryMeta, error) {
	q := url.Values{}
	if eq.VolumeID != "" {
		q.Set("volume_id", eq.VolumeID)
	}
	if eq.Namespace != "" {
		// Sent even without VolumeID, for the API to refuse: dropped, it
		// would widen the query to every namespace's events silently.
		q.Set("namespace", eq.Namespace)
	}
	if eq.Type != "" {
		q.Set("type", eq.Type)
	}
	if !eq.After.IsZero() {
		q.Set("after", eq.After.UTC().Format(time.RFC3339Nano))
	}
	if !eq.Before.IsZero() {
		q.Set("before", eq.Before.UTC().Format(time.RFC3339Nano))
	}
	return list[*structs.Event](c, ctx, "/v1/events", q, o)
}

// SystemGC runs the claim GC now and answers how many volumes it touched.
func (c *Client) SystemGC(ctx context.Context) (int, error) {
	var out api.GCResponse
	_, err := c.do(ctx, http.MethodPut, "/v1/system/gc", nil, nil, &out)
	return out.Volumes, err
}

// Leader reports the cluster leader.
func (c *Client) Leader(ctx context.Context) (*api.LeaderResponse, error) {
	var out api.LeaderResponse
	if _, err := c.do(ctx, http.MethodGet, "/v1/status/leader", nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
