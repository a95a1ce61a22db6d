package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// The JSON shapes of the volhost HTTP API that the tests read. They are
// declared here, not imported, so this module never requires the product
// module (whose dependency versions would then mix with the driver's).

// Claim is a volume claim as the API shows it.
type Claim struct {
	AllocID        string      `json:"alloc_id"`
	NodeID         string      `json:"node_id"`
	Mode           string      `json:"mode"`
	State          string      `json:"state"`
	ExternalNodeID string      `json:"external_node_id"`
	Attempts       int         `json:"attempts"`
	LastError      *ClaimError `json:"last_error"`
	SkipNodeStep   bool        `json:"skip_node_step"`
	// NodeUnpublished: NodeUnpublish succeeded, NodeUnstage next.
	NodeUnpublished bool   `json:"node_unpublished"`
	FenceReason     string `json:"fence_reason"`
	Hold            *struct {
		Module string `json:"module"`
		Reason string `json:"reason"`
	} `json:"hold"`
}

// ClaimError is a claim's last release error.
type ClaimError struct {
	Kind     string `json:"kind"`
	Step     string `json:"step"`
	Code     uint32 `json:"code"`
	CodeName string `json:"code_name"`
	Message  string `json:"message"`
}

// Stuck says why a volume cannot be released without an operator.
type Stuck struct {
	Reason   string `json:"reason"`
	AllocID  string `json:"alloc_id"`
	NodeID   string `json:"node_id"`
	Code     uint32 `json:"code"`
	CodeName string `json:"code_name"`
	Attempts int    `json:"attempts"`
}

// Volume is GET /v1/volume/ID.
type Volume struct {
	ID              string            `json:"id"`
	ExternalID      string            `json:"external_id"`
	Claims          map[string]*Claim `json:"claims"`
	Stuck           *Stuck            `json:"stuck"`
	ForceDeregister struct {
		Allowed bool `json:"allowed"`
	} `json:"force_deregister"`
}

// Leftover is one entry of GET /v1/volumes/leftovers.
type Leftover struct {
	ID             string `json:"id"`
	VolumeID       string `json:"volume_id"`
	ExternalID     string `json:"external_id"`
	AllocID        string `json:"alloc_id"`
	NodeID         string `json:"node_id"`
	ExternalNodeID string `json:"external_node_id"`
	State          string `json:"state"`
}

// VolumeSpec is a volume to register.
type VolumeSpec struct {
	ID             string `json:"id"`
	Namespace      string `json:"namespace"`
	ExternalID     string `json:"external_id"`
	PluginID       string `json:"plugin_id"`
	AccessMode     string `json:"access_mode"`
	AttachmentMode string `json:"attachment_mode"`
	FSType         string `json:"fs_type,omitempty"`
}

// AllocSpec is an allocation to upsert.
type AllocSpec struct {
	ID           string `json:"id"`
	Namespace    string `json:"namespace"`
	NodeID       string `json:"node_id"`
	JobID        string `json:"job_id,omitempty"`
	ClientStatus string `json:"client_status"`
}

// ClaimRequest is PUT /v1/volume/ID/claim.
type ClaimRequest struct {
	Namespace string `json:"namespace"`
	VolumeID  string `json:"volume_id"`
	AllocID   string `json:"alloc_id"`
	NodeID    string `json:"node_id"`
	Mode      string `json:"mode"`
}

// API is a small client for the volhost HTTP API.
type API struct {
	base string
	hc   *http.Client
	// Token, when set, is sent as X-Volhost-Token (an agent with ACL on).
	Token string
}

// NewAPI returns a client for the agent at base (http://host:port).
func NewAPI(base string) *API {
	return &API{base: base, hc: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}
}

// HTTPError is a non-2xx answer.
type HTTPError struct {
	Status int
	Body   string
}

func (e *HTTPError) Error() string { return fmt.Sprintf("HTTP %d: %s", e.Status, e.Body) }

func (a *API) do(ctx context.Context, method, path string, body, out any) (uint64, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.base+path, rd)
	if err != nil {
		return 0, err
	}
	if body != nil || method == http.MethodPut || method == http.MethodPost {
		req.Header.Set("Content-Type", "application/json")
	}
	if a.Token != "" {
		req.Header.Set("X-Volhost-Token", a.Token)
	}
	resp, err := a.hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		b, _ := io.ReadAll(resp.Body)
		return 0, &HTTPError{Status: resp.StatusCode, Body: strings.TrimSpace(string(b))}
	}
	idx, _ := strconv.ParseUint(resp.Header.Get("X-Volhost-Index"), 10, 64)
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			return idx, fmt.Errorf("%s %s: decoding: %w", method, path, err)
		}
	}
	return idx, nil
}

// Metrics scrapes /v1/metrics (Prometheus text format).
func (a *API) Metrics(ctx context.Context) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.base+"/v1/metrics", nil)
	if err != nil {
		return "", err
	}
	resp, err := a.hc.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", &HTTPError{Status: resp.StatusCode, Body: string(b)}
	}
	return string(b), err
}

// Leader reports whether the agent leads.
func (a *API) Leader(ctx context.Context) (bool, error) {
	var r struct {
		IsLeader bool `json:"is_leader"`
	}
	_, err := a.do(ctx, http.MethodGet, "/v1/status/leader", nil, &r)
	return r.IsLeader, err
}

// ModulesLoading counts the agent's modules still in their first load
// (state "loading": the agent compiles them after its API listens).
func (a *API) ModulesLoading(ctx context.Context) (int, error) {
	var r struct {
		Modules []struct {
			State string `json:"state"`
		} `json:"modules"`
	}
	if _, err := a.do(ctx, http.MethodGet, "/v1/modules", nil, &r); err != nil {
		return 0, err
	}
	n := 0
	for _, m := range r.Modules {
		if m.State == "loading" {
			n++
		}
	}
	return n, nil
}

// Volume reads a volume; with index > 0 it blocks until the volume changes
// past index or wait passes (a blocking query).
func (a *API) Volume(ctx context.Context, id string, index uint64, wait time.Duration) (*Volume, uint64, error) {
	q := url.Values{}
	if index > 0 {
		q.Set("index", strconv.FormatUint(index, 10))
		q.Set("wait", wait.String())
	}
	var v Volume
	idx, err := a.do(ctx, http.MethodGet, "/v1/volume/"+url.PathEscape(id)+"?"+q.Encode(), nil, &v)
	return &v, idx, err
}

// RegisterVolumes registers volumes in one write.
func (a *API) RegisterVolumes(ctx context.Context, vols []VolumeSpec) error {
	_, err := a.do(ctx, http.MethodPut, "/v1/volumes", map[string]any{"volumes": vols}, nil)
	return err
}

// UpsertAllocs writes allocations in one write.
func (a *API) UpsertAllocs(ctx context.Context, allocs []AllocSpec) error {
	_, err := a.do(ctx, http.MethodPut, "/v1/allocs", map[string]any{"allocs": allocs}, nil)
	return err
}

// Claim claims a volume (publishing it through the driver).
func (a *API) Claim(ctx context.Context, r ClaimRequest) error {
	_, err := a.do(ctx, http.MethodPut, "/v1/volume/"+url.PathEscape(r.VolumeID)+"/claim", r, nil)
	return err
}

// Bootstrap creates the first management token of an agent with ACL on
// and returns its secret.
func (a *API) Bootstrap(ctx context.Context) (string, error) {
	var r struct {
		SecretID string `json:"secret_id"`
	}
	_, err := a.do(ctx, http.MethodPost, "/v1/acl/bootstrap", nil, &r)
	return r.SecretID, err
}

// NodeFence is the fence recorded on a node (nil when it has none).
func (a *API) NodeFence(ctx context.Context, id string) (*NodeFence, error) {
	var n struct {
		Fence *NodeFence `json:"fence"`
	}
	_, err := a.do(ctx, http.MethodGet, "/v1/node/"+url.PathEscape(id), nil, &n)
	return n.Fence, err
}

// NodeFence is an operator's attestation that a node is off.
type NodeFence struct {
	Reason string `json:"reason"`
	Source string `json:"source"`
}

// Leftovers lists what force-deregistered volumes may have left attached.
func (a *API) Leftovers(ctx context.Context) ([]Leftover, error) {
	var l []Leftover
	_, err := a.do(ctx, http.MethodGet, "/v1/volumes/leftovers", nil, &l)
	return l, err
}

// WaitVolume blocks (blocking queries, no sleeps) until cond holds for the
// volume or ctx ends; it returns the last volume read.
func (a *API) WaitVolume(ctx context.Context, id string, cond func(*Volume) bool) (*Volume, error) {
	var index uint64
	for {
		v, idx, err := a.Volume(ctx, id, index, 10*time.Second)
		if err != nil {
			return v, err
		}
		if cond(v) {
			return v, nil
		}
		if ctx.Err() != nil {
			return v, ctx.Err()
		}
		index = idx
	}
}

// Event is one entry of GET /v1/events.
type Event struct {
	Index    uint64    `json:"index"`
	Time     time.Time `json:"time"`
	Type     string    `json:"type"`
	VolumeID string    `json:"volume_id"`
	AllocID  string    `json:"alloc_id"`
	Message  string    `json:"message"`
}

// Events lists the retained events matching q (volume_id, namespace,
// type), oldest first; one page of up to 1000.
func (a *API) Events(ctx context.Context, q url.Values) ([]Event, error) {
	q.Set("per_page", "1000")
	var evs []Event
	_, err := a.do(ctx, http.MethodGet, "/v1/events?"+q.Encode(), nil, &evs)
	return evs, err
}

// Alloc is GET /v1/alloc/ID.
type Alloc struct {
	ID           string    `json:"id"`
	ClientStatus string    `json:"client_status"`
	Source       string    `json:"source"`
	ModifyTime   time.Time `json:"modify_time"`
}

// Alloc reads an allocation.
func (a *API) Alloc(ctx context.Context, id string) (*Alloc, error) {
	var al Alloc
	_, err := a.do(ctx, http.MethodGet, "/v1/alloc/"+url.PathEscape(id), nil, &al)
	return &al, err
}
