// Package fault owns the fault injection and call recording shared by the
// driver programs: a gRPC unary interceptor that records every CSI call in
// arrival order and, when a fault is armed for its method, answers with a
// gRPC code, hangs, or both. Faults are what a real driver cannot be made to
// show on demand.
package fault

import (
	"context"
	"fmt"
	"path"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Rule is one armed fault for a CSI method (the short name, e.g.
// "ControllerUnpublishVolume").
type Rule struct {
	Method string `json:"method"`
	// Code is the gRPC code name answered ("Unavailable", "DeadlineExceeded",
	// ...); empty means the call proceeds to the driver after any Hang.
	Code string `json:"code,omitempty"`
	// Count is how many of the next calls the rule applies to; 0 or less
	// means every call until cleared.
	Count int `json:"count,omitempty"`
	// Hang delays the call this long (or until the caller gives up, since
	// the gRPC context carries the caller's deadline).
	Hang string `json:"hang,omitempty"`
	// Lose runs the call at the driver and then answers Code instead of
	// the driver's answer: the call took effect and its caller cannot know
	// (a connection that broke after the driver acted, a deadline that
	// fired while it finished). Needs Code. With Hang, the call runs
	// first and the lost answer is held for Hang: the driver has acted
	// while its caller still waits (a node agent killed between a step's
	// effect and its answer).
	Lose bool `json:"lose,omitempty"`

	code codes.Code
	hang time.Duration
}

// Parse checks a rule and resolves its code and duration.
func (r *Rule) Parse() error {
	if r.Method == "" {
		return fmt.Errorf("fault rule: method is required")
	}
	if r.Code != "" {
		var c codes.Code
		if err := c.UnmarshalJSON([]byte(`"` + codeName(r.Code) + `"`)); err != nil {
			return fmt.Errorf("fault rule for %s: unknown gRPC code %q", r.Method, r.Code)
		}
		r.code = c
	}
	if r.Hang != "" {
		d, err := time.ParseDuration(r.Hang)
		if err != nil || d < 0 {
			return fmt.Errorf("fault rule for %s: bad hang %q", r.Method, r.Hang)
		}
		r.hang = d
	}
	if r.Lose && (r.Code == "" || r.code == codes.OK) {
		return fmt.Errorf("fault rule for %s: lose needs the code the caller gets instead of the driver's answer", r.Method)
	}
	if r.Code == "" && r.Hang == "" {
		return fmt.Errorf("fault rule for %s: set code, hang or both", r.Method)
	}
	return nil
}

// codeName maps CamelCase names to the UPPER_SNAKE names codes.Code parses.
func codeName(s string) string {
	m := map[string]string{
		"OK": "OK", "Canceled": "CANCELLED", "Unknown": "UNKNOWN", "InvalidArgument": "INVALID_ARGUMENT",
		"DeadlineExceeded": "DEADLINE_EXCEEDED", "NotFound": "NOT_FOUND", "AlreadyExists": "ALREADY_EXISTS",
		"PermissionDenied": "PERMISSION_DENIED", "ResourceExhausted": "RESOURCE_EXHAUSTED",
		"FailedPrecondition": "FAILED_PRECONDITION", "Aborted": "ABORTED", "OutOfRange": "OUT_OF_RANGE",
		"Unimplemented": "UNIMPLEMENTED", "Internal": "INTERNAL", "Unavailable": "UNAVAILABLE",
		"DataLoss": "DATA_LOSS", "Unauthenticated": "UNAUTHENTICATED",
	}
	if n, ok := m[s]; ok {
		return n
	}
	return s
}

// Call is one recorded CSI call.
type Call struct {
	Method   string `json:"method"`
	VolumeID string `json:"volume_id,omitempty"`
	NodeID   string `json:"node_id,omitempty"`
	// Service names which socket answered ("controller" or a node name).
	Service string `json:"service,omitempty"`
	// Code is the gRPC code the call ended with.
	Code string `json:"code"`
	// Injected says the answer came from a fault rule, not the driver.
	Injected bool `json:"injected,omitempty"`
	// Ran says the driver ran the call although the answer was injected
	// (a Lose rule); DriverCode is what the driver answered.
	Ran        bool   `json:"ran,omitempty"`
	DriverCode string `json:"driver_code,omitempty"`
	// Caller is the volhost server that sent the call (its
	// x-volhost-server metadata), Start and End when it arrived and
	// answered: the chaos test checks them for overlaps and for calls
	// from a paused or deposed leader.
	Caller string    `json:"caller,omitempty"`
	Start  time.Time `json:"start"`
	End    time.Time `json:"end,omitzero"`
}

// Injector records calls and applies armed rules. The zero value is not
// usable; use New.
type Injector struct {
	mu    sync.Mutex
	rules []*Rule
	calls []Call
	// started counts calls that entered the interceptor, so a test can see
	// a hanging call before it returns.
	started []Call
	// unblock is closed by Clear: hanging calls then go on at once, so a
	// test decides when a hang ends instead of guessing a duration.
	unblock chan struct{}
}

// New returns an Injector with no rules.
func New() *Injector { return &Injector{unblock: make(chan struct{})} }

// Arm adds rules after checking all of them; a bad rule arms none.
func (in *Injector) Arm(rules ...Rule) error {
	parsed := make([]*Rule, 0, len(rules))
	for i := range rules {
		r := rules[i]
		if err := r.Parse(); err != nil {
			return err
		}
		parsed = append(parsed, &r)
	}
	in.mu.Lock()
	in.rules = append(in.rules, parsed...)
	in.mu.Unlock()
	return nil
}

// Clear removes every rule and ends every hang in progress.
func (in *Injector) Clear() {
	in.mu.Lock()
	in.rules = nil
	close(in.unblock)
	in.unblock = make(chan struct{})
	in.mu.Unlock()
}

// Calls returns the finished calls in completion order, and the calls that
// started (in arrival order).
func (in *Injector) Calls() (done, started []Call) {
	in.mu.Lock()
	defer in.mu.Unlock()
	return append([]Call(nil), in.calls...), append([]Call(nil), in.started...)
}

// ResetCalls forgets the recorded calls.
func (in *Injector) ResetCalls() {
	in.mu.Lock()
	in.calls, in.started = nil, nil
	in.mu.Unlock()
}

// takeLocked returns the rule for method and consumes one use of it: the
// first counted rule, else the first persistent one, so a one-off fault
// armed during a run applies over a standing one (a hang on every
// detach).
func (in *Injector) takeLocked(method string) *Rule {
	i := slices.IndexFunc(in.rules, func(r *Rule) bool { return r.Method == method && r.Count > 0 })
	if i < 0 {
		i = slices.IndexFunc(in.rules, func(r *Rule) bool { return r.Method == method })
	}
	if i >= 0 {
		r := in.rules[i]
		if r.Count > 0 {
			r.Count--
			if r.Count == 0 {
				in.rules = append(in.rules[:i], in.rules[i+1:]...)
			}
		}
		return r
	}
	return nil
}

type volumeGetter interface {
	GetVolumeId() string
}
type nodeGetter interface {
	GetNodeId() string
}

// Interceptor returns a unary server interceptor that records calls under
// the service name and applies the armed rules.
func (in *Injector) Interceptor(service string) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		return in.Apply(ctx, service, path.Base(info.FullMethod), req, func(ctx context.Context) (any, error) {
			return handler(ctx, req)
		})
	}
}

// Apply records one call of method and runs it through the armed rules: a
// rule's hang first (cut short by the caller's deadline), then its code, or
// handler when the rule sets no code or the code is OK. A Lose rule runs
// handler before its hang and answers its code whatever the driver said. A scripted error
// sequence is a series of Count 1 rules for one method, taken in order.
func (in *Injector) Apply(ctx context.Context, service, method string, req any, handler func(context.Context) (any, error)) (any, error) {
	c := Call{Method: method, Service: service, Start: time.Now()}
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get("x-volhost-server"); len(v) > 0 {
			c.Caller = v[0]
		}
	}
	if v, ok := req.(volumeGetter); ok {
		c.VolumeID = v.GetVolumeId()
	}
	if n, ok := req.(nodeGetter); ok {
		c.NodeID = n.GetNodeId()
	}
	in.mu.Lock()
	startedAt := len(in.started)
	in.started = append(in.started, c)
	rule := in.takeLocked(c.Method)
	var r Rule
	if rule != nil {
		r = *rule
	}
	unblock := in.unblock
	in.mu.Unlock()

	var resp any
	var err error
	if rule != nil && r.Lose && ctx.Err() == nil {
		_, derr := handler(ctx)
		c.Ran, c.DriverCode = true, status.Code(derr).String()
		// The effect is visible in the started record at once, while the
		// answer is still held.
		in.mu.Lock()
		in.started[startedAt].Ran, in.started[startedAt].DriverCode = c.Ran, c.DriverCode
		in.mu.Unlock()
	}
	if rule != nil && r.hang > 0 {
		t := time.NewTimer(r.hang)
		select {
		case <-t.C:
		case <-ctx.Done():
		case <-unblock:
		}
		t.Stop()
	}
	switch {
	case rule != nil && c.Ran:
		err = status.Errorf(r.code, "injected fault for %s: the driver answered %s, this answer was lost", c.Method, c.DriverCode)
		c.Injected = true
	case rule != nil && r.Code != "" && r.code != codes.OK:
		err = status.Errorf(r.code, "injected fault for %s", c.Method)
		c.Injected = true
	case ctx.Err() != nil:
		err = status.FromContextError(ctx.Err()).Err()
		c.Injected = true
	default:
		resp, err = handler(ctx)
	}
	c.Code = status.Code(err).String()
	c.End = time.Now()
	in.mu.Lock()
	in.calls = append(in.calls, c)
	in.mu.Unlock()
	return resp, err
}
