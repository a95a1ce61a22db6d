package nomad

import (
	"context"
	"errors"
	"fmt"
	"maps"

	"github.com/hashicorp/nomad/api"
)

// Node is what the bridge reads of a Nomad node.
type Node struct {
	ID          string
	Name        string
	Status      string // initializing, ready, down, disconnected
	ModifyIndex uint64
}

// Alloc is what the bridge reads of a Nomad allocation: never its job
// (event payloads carry none, as measured against Nomad v1.11.3).
type Alloc struct {
	ID            string
	Namespace     string
	NodeID        string
	NodeName      string
	JobID         string
	TaskGroup     string
	ClientStatus  string
	DesiredStatus string
	ModifyIndex   uint64
}

// Batch is one index of the event stream: the nodes and allocations it
// changed. Err ends the stream.
type Batch struct {
	Index  uint64
	Nodes  []Node
	Allocs []Alloc
	Err    error
}

// Nomad is what the bridge reads from Nomad: the api client (apiClient),
// or a fake in tests.
type Nomad interface {
	// Nodes lists every node with the index the list is at.
	Nodes(ctx context.Context) ([]Node, uint64, error)
	// Allocs lists the allocations of the configured namespaces.
	Allocs(ctx context.Context) ([]Alloc, uint64, error)
	// Meta is the job meta merged with the task group's (the group's
	// keys win) of the job version the allocation runs (GET
	// /v1/allocation/:id: event payloads carry no job).
	Meta(ctx context.Context, allocID string) (map[string]string, error)
	// Stream follows the event stream (topics Node and Allocation) from
	// index, inclusive. The channel closes after a Batch with Err, or
	// when ctx ends.
	Stream(ctx context.Context, index uint64) (<-chan Batch, error)
}

// apiClient is Nomad through github.com/hashicorp/nomad/api.
type apiClient struct {
	c          *api.Client
	namespaces []string
}

// NewClient builds the api client for s.
func NewClient(s Settings) (Nomad, error) {
	cfg := api.DefaultConfig()
	cfg.Address, cfg.Region, cfg.SecretID = s.Address, s.Region, s.Token
	if t := s.TLS; t != nil {
		cfg.TLSConfig = &api.TLSConfig{CACert: t.CACert, ClientCert: t.ClientCert, ClientKey: t.ClientKey,
			TLSServerName: t.ServerName, Insecure: t.Insecure}
	}
	c, err := api.NewClient(cfg)
	if err != nil {
		return nil, fmt.Errorf("nomad client for %s: %w", s.ShownAddress(), err)
	}
	ns := s.Namespaces
	if len(ns) == 0 {
		ns = []string{"*"}
	}
	return &apiClient{c: c, namespaces: ns}, nil
}

func (a *apiClient) query(ctx context.Context, ns string) *api.QueryOptions {
	return (&api.QueryOptions{Namespace: ns, AllowStale: false}).WithContext(ctx)
}

func (a *apiClient) Nodes(ctx context.Context) ([]Node, uint64, error) {
	stubs, meta, err := a.c.Nodes().List(a.query(ctx, ""))
	if err != nil {
		return nil, 0, explain(err)
	}
	out := make([]Node, 0, len(stubs))
	for _, n := range stubs {
		out = append(out, Node{ID: n.ID, Name: n.Name, Status: n.Status, ModifyIndex: n.ModifyIndex})
	}
	return out, meta.LastIndex, nil
}

func (a *apiClient) Allocs(ctx context.Context) ([]Alloc, uint64, error) {
	var out []Alloc
	var index uint64
	for _, ns := range a.namespaces {
		stubs, meta, err := a.c.Allocations().List(a.query(ctx, ns))
		if err != nil {
			return nil, 0, explain(err)
		}
		index = max(index, meta.LastIndex)
		for _, s := range stubs {
			out = append(out, Alloc{ID: s.ID, Namespace: s.Namespace, NodeID: s.NodeID, NodeName: s.NodeName, JobID: s.JobID,
				TaskGroup: s.TaskGroup, ClientStatus: s.ClientStatus, DesiredStatus: s.DesiredStatus,
				ModifyIndex: s.ModifyIndex})
		}
	}
	return out, index, nil
}

func (a *apiClient) Meta(ctx context.Context, allocID string) (map[string]string, error) {
	al, _, err := a.c.Allocations().Info(allocID, a.query(ctx, "*"))
	if err != nil {
		return nil, explain(err)
	}
	if al.Job == nil {
		return nil, fmt.Errorf("allocation %s: Nomad answered without its job", allocID)
	}
	meta := maps.Clone(al.Job.Meta)
	if meta == nil {
		meta = map[string]string{}
	}
	if tg := al.Job.LookupTaskGroup(al.TaskGroup); tg != nil {
		maps.Copy(meta, tg.Meta)
	}
	return meta, nil
}

func (a *apiClient) Stream(ctx context.Context, index uint64) (<-chan Batch, error) {
	topics := map[api.Topic][]string{api.TopicNode: {"*"}, api.TopicAllocation: {"*"}}
	ns := "*"
	if len(a.namespaces) == 1 {
		ns = a.namespaces[0]
	}
	in, err := a.c.EventStream().Stream(ctx, topics, index, a.query(ctx, ns))
	if err != nil {
		return nil, explain(err)
	}
	out := make(chan Batch)
	go func() {
		defer close(out)
		for evs := range in {
			b := Batch{Index: evs.Index, Err: evs.Err}
			if b.Err == nil {
				b.Err = a.decode(evs, &b)
			}
			if b.Err != nil {
				b.Err = fmt.Errorf("nomad event stream: %w", explain(b.Err))
			}
			select {
			case out <- b:
			case <-ctx.Done():
				return
			}
			if b.Err != nil {
				return
			}
		}
	}()
	return out, nil
}

func (a *apiClient) decode(evs *api.Events, b *Batch) error {
	for i := range evs.Events {
		e := &evs.Events[i]
		switch e.Topic {
		case api.TopicNode:
			n, err := e.Node()
			if err != nil {
				return err
			}
			if n != nil {
				b.Nodes = append(b.Nodes, Node{ID: n.ID, Name: n.Name, Status: n.Status, ModifyIndex: n.ModifyIndex})
			}
		case api.TopicAllocation:
			al, err := e.Allocation()
			if err != nil {
				return err
			}
			if al == nil || !mirrors(a.namespaces, al.Namespace) {
				continue
			}
			b.Allocs = append(b.Allocs, Alloc{ID: al.ID, Namespace: al.Namespace, NodeID: al.NodeID, NodeName: al.NodeName,
				JobID: al.JobID, TaskGroup: al.TaskGroup, ClientStatus: al.ClientStatus,
				DesiredStatus: al.DesiredStatus, ModifyIndex: al.ModifyIndex})
		}
	}
	return nil
}

// explain turns the api client's errors into one clear line: a refused
// token says so.
func explain(err error) error {
	var ue api.UnexpectedResponseError
	if errors.As(err, &ue) {
		switch ue.StatusCode() {
		case 401, 403:
			return fmt.Errorf("Nomad refused the token (HTTP %d %s): %w", ue.StatusCode(), ue.Body(), ErrAuth)
		}
	}
	return err
}

// ErrAuth marks a refused Nomad token.
var ErrAuth = errors.New("check the token of the scheduler \"nomad\" block")
