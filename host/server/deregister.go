package server

import (
	"context"

	"github.com/volhost/volhost/host/structs"
)

// DeregisterNode removes a retired node. The store refuses it while an
// allocation on the node runs, and while claims are still on it unless
// force: the node gone, those claims skip their node steps (no unmount
// there), so force is the operator's word that the node is off. It answers
// the claims whose node steps will be skipped.
func (s *Server) DeregisterNode(ctx context.Context, id string, force bool) ([]structs.NodeClaim, uint64, error) {
	if id == "" {
		return nil, 0, structs.Invalid("node_id", "node ID is required")
	}
	idx, resp, err := s.log.Apply(ctx, structs.NodeDeregisterType, &structs.NodeDeregisterRequest{NodeID: id, Force: force})
	if err != nil {
		return nil, 0, err
	}
	claims, _ := resp.([]structs.NodeClaim)
	return claims, idx, nil
}

// DeregisterPlugin removes a plugin no volume uses; the store refuses it
// while one does, naming them.
func (s *Server) DeregisterPlugin(ctx context.Context, id string) (uint64, error) {
	if id == "" {
		return 0, structs.Invalid("plugin_id", "plugin ID is required")
	}
	idx, _, err := s.log.Apply(ctx, structs.PluginDeregisterType, &structs.PluginDeregisterRequest{PluginID: id})
	return idx, err
}
