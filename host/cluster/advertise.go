package cluster

import (
	"context"
	"net/http"
	"time"
)

// DefaultAdvertiseInterval is how often a follower checks its member
// record (Config.AdvertiseInterval).
const DefaultAdvertiseInterval = 2 * time.Second

// SetJoinClient sets the HTTP client join requests go out with (TLS,
// join token); RetryJoin sets it too.
func (c *Cluster) SetJoinClient(hc *http.Client) {
	c.mu.Lock()
	c.joinClient = hc
	c.mu.Unlock()
}

func (c *Cluster) httpJoinClient() *http.Client {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.joinClient == nil {
		return &http.Client{Timeout: 10 * time.Second}
	}
	return c.joinClient
}

// advertise keeps this server's member record current while it follows.
// The leader records what a joiner sends, but a server that joined
// through a leader older than the feature gates (a rolling upgrade), or
// that restarted with a new binary and no -join, has a record without its
// version and features, and the gates stay closed until it has one. So a
// follower whose record differs from what it runs asks the leader again
// (a join is idempotent), once the leader is a version that records
// features: an older one would drop them.
func (c *Cluster) advertise() {
	defer c.wg.Done()
	every := c.cfg.AdvertiseInterval
	if every <= 0 {
		every = DefaultAdvertiseInterval
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-c.stopCh:
			return
		case <-t.C:
		}
		if !c.cfg.Server || c.IsLeader() {
			continue // the leader records itself (reconcileMeta)
		}
		self := c.selfMember()
		if self.HTTPAddr == "" {
			continue
		}
		if cur, ok := c.meta.member(self.ID); ok && sameMember(cur, self) {
			continue
		}
		_, leaderID := c.raft.LeaderWithID()
		lm, ok := c.meta.member(string(leaderID))
		if !ok || len(lm.Features) == 0 || lm.HTTPAddr == "" {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), every)
		go func() { <-c.stopCh; cancel() }()
		if _, err := c.joinOnce(ctx, c.httpJoinClient(), lm.HTTPAddr); err != nil {
			c.logger.Warn("advertising this server's version and features to the leader failed", "leader", leaderID, "error", err)
		} else {
			c.logger.Info("advertised this server's version and features to the leader", "leader", leaderID, "build", BuildVersion)
		}
		cancel()
	}
}
