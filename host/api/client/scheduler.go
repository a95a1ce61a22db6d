package client

import (
	"context"
	"net/http"

	"github.com/volhost/volhost/host/api"
	"github.com/volhost/volhost/host/scheduler"
)

// SchedulerStatus returns the scheduler sources' status (the leader's).
func (c *Client) SchedulerStatus(ctx context.Context) ([]scheduler.Status, error) {
	var out api.SchedulersResponse
	_, err := c.do(ctx, http.MethodGet, "/v1/scheduler/status", nil, nil, &out)
	return out.Schedulers, err
}
