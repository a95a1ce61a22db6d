package agent

import (
	"context"
	"fmt"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/gohcl"

	"github.com/volhost/volhost/host/scheduler"
	"github.com/volhost/volhost/host/scheduler/nomad"
)

// SchedulerConfig is a `scheduler "KIND" { ... }` block: the body is the
// source's own settings (nomad.Config for "nomad").
type SchedulerConfig struct {
	Kind string   `hcl:"kind,label"`
	Body hcl.Body `hcl:",remain"`
}

// validateSchedulers decodes and checks the scheduler blocks: one source
// of each kind, and "nomad" is the only kind so far.
func (c *Config) validateSchedulers() (*nomad.Settings, error) {
	var out *nomad.Settings
	for _, sc := range c.Schedulers {
		if sc.Kind != nomad.SourceName {
			return nil, fmt.Errorf("scheduler %q: unknown scheduler (the only one is %q)", sc.Kind, nomad.SourceName)
		}
		if out != nil {
			return nil, fmt.Errorf("scheduler %q appears twice", sc.Kind)
		}
		var nc nomad.Config
		if sc.Body != nil {
			if diags := gohcl.DecodeBody(sc.Body, nil, &nc); diags.HasErrors() {
				return nil, fmt.Errorf("scheduler %q: %w", sc.Kind, diags)
			}
		}
		s, err := nc.Validate()
		if err != nil {
			return nil, err
		}
		out = &s
	}
	return out, nil
}

// setupSchedulers builds the scheduler sources (none without a block).
func (a *Agent) setupSchedulers(d Durations) error {
	if d.nomad == nil {
		return nil
	}
	if msg := d.nomad.Insecure(); msg != "" {
		a.logger.Warn(msg)
	}
	b, err := nomad.New(*d.nomad, nomad.Deps{Writer: a.Server, Store: a.Store, Logger: a.logger, Clock: a.clock})
	if err != nil {
		return err
	}
	a.Schedulers = append(a.Schedulers, b)
	return nil
}

// SchedulerStatus implements the API's scheduler status: each source's
// state on this server (stopped on a follower: the leader runs them).
func (a *Agent) SchedulerStatus() []scheduler.Status {
	out := make([]scheduler.Status, 0, len(a.Schedulers))
	for _, s := range a.Schedulers {
		out = append(out, s.Status())
	}
	return out
}

// startSchedulers runs the sources for this leadership, under its term,
// like the watcher: only the leader mirrors a scheduler. The returned
// function stops them and waits.
func (a *Agent) startSchedulers(ctx context.Context) func() {
	if len(a.Schedulers) == 0 {
		return func() {}
	}
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := a.Cluster.WaitForLeader(sctx); err != nil {
			return
		}
		term := a.Cluster.ReadyTerm()
		if term == 0 {
			return
		}
		finished := make(chan struct{}, len(a.Schedulers))
		for _, s := range a.Schedulers {
			go func() {
				defer func() { finished <- struct{}{} }()
				if err := s.Run(sctx, term); err != nil && sctx.Err() == nil {
					a.logger.Error("scheduler source stopped", "source", s.Name(), "error", err)
				}
			}()
		}
		for range a.Schedulers {
			<-finished
		}
	}()
	return func() {
		cancel()
		<-done
	}
}
