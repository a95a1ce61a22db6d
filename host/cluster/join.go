package cluster

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/hashicorp/raft"

	"github.com/volhost/volhost/host/structs"
)

// JoinPath is the API route a join request is posted to (host/api serves
// it and forwards it to the leader).
const JoinPath = "/v1/operator/raft/join"

// RetryJoin asks the servers at addrs (their HTTP API addresses) to let
// this server join, trying them in turn with exponential backoff (500ms
// up to maxInterval) until one accepts, ctx ends, or the cluster refuses
// for good (another cluster ID or protocol version: ErrJoinRefused). A
// bootstrap_expect seed answers "pending" until enough servers asked; that
// is retried like a failure. Any server will do: followers forward the
// join to the leader. Joining again after a restart is harmless and
// refreshes this server's HTTP address in the members map.
func (c *Cluster) RetryJoin(ctx context.Context, addrs []string, maxInterval time.Duration, hc *http.Client) error {
	if len(addrs) == 0 {
		return nil
	}
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	c.SetJoinClient(hc)
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = 500 * time.Millisecond
	if maxInterval > 0 {
		b.MaxInterval = maxInterval
	}
	b.MaxElapsedTime = 0
	attempt := 0
	op := func() error {
		attempt++
		var errs []error
		for _, addr := range addrs {
			resp, err := c.joinOnce(ctx, hc, addr)
			switch {
			case err == nil && !resp.Pending:
				c.logger.Info("joined the cluster", "via", addr, "cluster_id", resp.ClusterID, "leader", resp.Leader)
				return nil
			case errors.Is(err, ErrJoinRefused):
				c.logger.Error("join refused", "via", addr, "error", err)
				return backoff.Permanent(err)
			case err == nil:
				errs = append(errs, fmt.Errorf("%s: waiting for bootstrap_expect servers", addr))
			default:
				errs = append(errs, err)
			}
		}
		err := errors.Join(errs...)
		c.logger.Warn("join attempt failed; retrying", "attempt", attempt, "error", err)
		return err
	}
	if err := backoff.Retry(op, backoff.WithContext(b, ctx)); err != nil {
		return fmt.Errorf("retry-join: %w", err)
	}
	return nil
}

// joinError is a refusal a server answered.
type joinError struct {
	Error string `json:"error"`
}

func (c *Cluster) joinOnce(ctx context.Context, hc *http.Client, addr string) (JoinResponse, error) {
	self := c.Self()
	resp, err := c.postJoin(ctx, hc, addr, self)
	if err != nil && errors.Is(err, errUnknownField) {
		// A server older than the feature gates refuses the build and
		// features fields: join in its form. The record it writes lacks
		// them; advertise sends them again once a newer server leads.
		c.logger.Info("the server asked is older than the feature gates; joining in its request form", "via", addr)
		return c.postJoin(ctx, hc, addr, legacyJoinRequest{ID: self.ID, RaftAddr: self.RaftAddr,
			HTTPAddr: self.HTTPAddr, ClusterID: self.ClusterID, Version: self.Version})
	}
	return resp, err
}

// errUnknownField marks a 400 answer refusing a field of the request.
var errUnknownField = errors.New("unknown field")

func (c *Cluster) postJoin(ctx context.Context, hc *http.Client, addr string, join any) (JoinResponse, error) {
	body, err := json.Marshal(join)
	if err != nil {
		return JoinResponse{}, err
	}
	base := addr
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(base, "/")+JoinPath, bytes.NewReader(body))
	if err != nil {
		return JoinResponse{}, fmt.Errorf("join via %s: %w", addr, err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return JoinResponse{}, fmt.Errorf("join via %s: %w", addr, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	switch {
	case resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusAccepted:
		var jr JoinResponse
		if err := json.Unmarshal(raw, &jr); err != nil {
			return JoinResponse{}, fmt.Errorf("join via %s: decode answer: %w", addr, err)
		}
		return jr, nil
	case resp.StatusCode == http.StatusConflict || resp.StatusCode == http.StatusBadRequest:
		// The cluster checked this server and said no: asking again
		// cannot change the answer.
		var je joinError
		_ = json.Unmarshal(raw, &je)
		if resp.StatusCode == http.StatusBadRequest && strings.Contains(je.Error, "unknown field") {
			return JoinResponse{}, fmt.Errorf("%w via %s: %w: %s", ErrJoinRefused, addr, errUnknownField, je.Error)
		}
		return JoinResponse{}, fmt.Errorf("%w via %s: %s", ErrJoinRefused, addr, je.Error)
	}
	var je joinError
	_ = json.Unmarshal(raw, &je)
	return JoinResponse{}, fmt.Errorf("join via %s: %s: %s", addr, resp.Status, je.Error)
}

// ProbeFunc checks that a server answers at its raft address (with mutual
// TLS: that it completes a handshake as a server of this cluster's CA).
type ProbeFunc func(ctx context.Context, raftAddr string) error

// SetProbe sets how CheckJoin and CheckRemove tell live servers from dead
// or fake ones (the agent sets TCPProbe or TLSProbe). Without one they
// only count voters.
func (c *Cluster) SetProbe(p ProbeFunc) {
	c.mu.Lock()
	c.probe = p
	c.mu.Unlock()
}

// probeTimeout bounds one probe.
const probeTimeout = 2 * time.Second

// TCPProbe dials the address.
func TCPProbe(ctx context.Context, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	return conn.Close()
}

// TLSProbe dials the address and completes a TLS handshake with cfg,
// which verifies the peer's certificate.
func TLSProbe(cfg *tls.Config) ProbeFunc {
	return func(ctx context.Context, addr string) error {
		ctx, cancel := context.WithTimeout(ctx, probeTimeout)
		defer cancel()
		d := tls.Dialer{Config: cfg}
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return err
		}
		return conn.Close()
	}
}

// ErrNoQuorum marks a membership change refused because the cluster would
// be left without a quorum of live voters. It wraps structs.ErrConflict
// (409).
var ErrNoQuorum = structs.Conflict("would leave the cluster without quorum")

// CheckJoin refuses, on the leader, a join that would leave the cluster
// without a quorum: the joiner must answer at its raft address (a fake
// voter that never answers raises the quorum and blocks every write:
// TestJoinAttackRefused in host/agent), and the live voters plus the joiner must be a
// majority of the new configuration. A server already in the
// configuration at the same address passes (a restart's rejoin).
func (c *Cluster) CheckJoin(ctx context.Context, req JoinRequest) error {
	if !c.IsLeader() {
		return nil // a bootstrap_expect seed collecting joins, or Join answers 503
	}
	voters, err := c.voterList()
	if err != nil {
		return err
	}
	for _, v := range voters {
		if string(v.ID) == req.ID && string(v.Address) == req.RaftAddr {
			return nil
		}
	}
	c.mu.Lock()
	probe := c.probe
	c.mu.Unlock()
	if probe != nil {
		if err := probe(ctx, req.RaftAddr); err != nil {
			return fmt.Errorf("%w: server %s does not answer at its raft address %s (%v); adding it as a voter would raise the quorum with a member that cannot vote",
				ErrNoQuorum, req.ID, req.RaftAddr, err)
		}
	}
	after := len(voters) + 1
	live := 1 + c.liveOthers(ctx, voters, "") // this leader, the others that answer, and the joiner
	if live < after/2+1 {
		return fmt.Errorf("%w: %d of %d voters would answer, %d needed", ErrNoQuorum, live, after, after/2+1)
	}
	return nil
}

// CheckRemove refuses, on the leader, removing a voter when the voters
// left would not hold a quorum of live servers, or when none would be
// left. Removing a dead server is what remove-peer is for, so the server
// removed is not counted.
func (c *Cluster) CheckRemove(ctx context.Context, id string) error {
	if !c.IsLeader() {
		return nil
	}
	voters, err := c.voterList()
	if err != nil {
		return err
	}
	found := false
	for _, v := range voters {
		found = found || string(v.ID) == id
	}
	if !found {
		return nil // not a voter: RemovePeer answers (404 or removes a non-voter)
	}
	after := len(voters) - 1
	if after == 0 {
		return fmt.Errorf("%w: %s is the last voter", ErrNoQuorum, id)
	}
	live := c.liveOthers(ctx, voters, id)
	if id != c.cfg.NodeID {
		live++ // this leader
	}
	if live < after/2+1 {
		return fmt.Errorf("%w: after removing %s, %d of %d voters would answer, %d needed",
			ErrNoQuorum, id, live, after, after/2+1)
	}
	return nil
}

func (c *Cluster) voterList() ([]raft.Server, error) {
	f := c.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, raftErr("configuration", err)
	}
	var out []raft.Server
	for _, s := range f.Configuration().Servers {
		if s.Suffrage == raft.Voter {
			out = append(out, s)
		}
	}
	return out, nil
}

// liveOthers counts the voters other than this server and skip that
// answer the probe (all of them without a probe).
func (c *Cluster) liveOthers(ctx context.Context, voters []raft.Server, skip string) int {
	c.mu.Lock()
	probe := c.probe
	c.mu.Unlock()
	n := 0
	for _, v := range voters {
		if string(v.ID) == c.cfg.NodeID || string(v.ID) == skip {
			continue
		}
		if probe == nil || probe(ctx, string(v.Address)) == nil {
			n++
		}
	}
	return n
}
