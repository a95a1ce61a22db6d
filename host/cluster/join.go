package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v4"
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
	body, err := json.Marshal(c.Self())
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
		return JoinResponse{}, fmt.Errorf("%w via %s: %s", ErrJoinRefused, addr, je.Error)
	}
	var je joinError
	_ = json.Unmarshal(raw, &je)
	return JoinResponse{}, fmt.Errorf("join via %s: %s: %s", addr, resp.Status, je.Error)
}
