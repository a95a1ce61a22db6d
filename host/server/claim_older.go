package server

import (
	"context"
	"errors"
	"fmt"

	"github.com/volhost/volhost/host/structs"
)

// writesAhead reports whether the claim path writes its publishing record
// before its first CSI call. Only once every server of the cluster
// understands the publishing state (host/cluster's claim-publishing gate):
// an older one refuses a claim written in it, and its replica would lack
// the claim. A log that does not say (a test's) writes ahead.
func (s *Server) writesAhead() bool {
	g, ok := s.log.(interface{ ClaimsWriteAhead() bool })
	return !ok || g.ClaimsWriteAhead()
}

// claimPublishFirst is the claim path of the releases before the
// write-ahead record, used during a rolling upgrade until the last server
// understands it: the CSI calls first, then the claim committed taken, a
// refused publish rolled back with nothing recorded. What is lost until
// then (RATIONALE, Safety): a leader that dies between its first call and
// the commit leaves an attachment or a mount no claim accounts for, which
// no release undoes.
func (s *Server) claimPublishFirst(ctx context.Context, pub *publisher, record *structs.VolumeClaimRequest) (*structs.Claim, error) {
	key := volumeKey(pub.vol.Namespace, pub.vol.ID)
	// The plugin as this run read it says whether it attaches: there is
	// no committed record to read it from.
	if err := pub.publishSteps(ctx, pub.plugin.Capabilities.PublishUnpublish); err != nil {
		pub.rollback(ctx)
		return nil, err
	}
	taken := pub.claim.Copy()
	taken.State = structs.ClaimTaken
	taken.ModifyTime = s.clock.Now()
	commit := *record
	commit.Claim = taken
	if _, _, err := s.log.Apply(ctx, structs.VolumeClaimType, &commit); err != nil {
		if errors.Is(err, structs.ErrOutcomeUnknown) {
			// The claim may be committed: undoing its publish would take
			// the volume from a workload that holds it. A retry of the
			// same request finds the claim or makes it.
			s.logger.Warn("claim commit unconfirmed; publish kept for a retry", "volume", key,
				"alloc", taken.AllocID, "node", taken.NodeID, "error", err)
		} else {
			pub.rollback(ctx)
		}
		return nil, fmt.Errorf("claim of volume %q by allocation %q: %w", key, taken.AllocID, err)
	}
	s.logger.Info("volume claimed (publish first: a server of the cluster does not know the publishing record yet)",
		"volume", key, "alloc", taken.AllocID, "node", taken.NodeID, "plugin", pub.plugin.ID, "mode", taken.Mode)
	return taken, nil
}
