package attach

import (
	"time"

	"github.com/volhost/volhost/abi"
	"github.com/volhost/volhost/host/structs"
)

// Views: the small purpose-built parts of objects a module sees (abi).
// The adapter's request at publish and at release, the policy's request
// and the fence question are all built from these, so a module sees a
// claim the same way whoever asks.

// StatusGone is the status of a missing object in a view (a
// garbage-collected allocation or node), as the ABI spells it.
const StatusGone = "gone"

// VolumeView is volume v as a module sees it (no secrets, ever).
func VolumeView(v *structs.Volume) abi.VolumeView {
	return abi.VolumeView{
		Namespace:      v.Namespace,
		ID:             v.ID,
		PluginID:       v.PluginID,
		AccessMode:     string(v.AccessMode),
		AttachmentMode: string(v.AttachmentMode),
		ExternalID:     v.ExternalID,
		Context:        v.Context,
	}
}

// ClaimView is claim c as a module sees it.
func ClaimView(c *structs.Claim) abi.ClaimView {
	cv := abi.ClaimView{
		AllocID:        c.AllocID,
		NodeID:         c.NodeID,
		Mode:           string(c.Mode),
		State:          viewState(c.State),
		Attempts:       uint32(c.Attempts),
		ExternalNodeID: c.ExternalNodeID,
		AccessMode:     string(c.AccessMode),
		AttachmentMode: string(c.AttachmentMode),
	}
	if c.LastError != nil {
		cv.LastErrorCode = c.LastError.Code
		cv.LastErrorKind = string(c.LastError.Kind)
	}
	return cv
}

// viewState is the claim state a module sees. A publishing claim is shown
// as taken: the ABI's states are the release's (abi.ClaimView), and for a
// policy both are a claim in use whose node steps are all still to do.
func viewState(s structs.ClaimState) string {
	if s == structs.ClaimPublishing {
		return string(structs.ClaimTaken)
	}
	return string(s)
}

// NodeView describes node id (n, nil when gone) towards plugin pluginID
// as of now; Meta only for adapter requests and fence questions.
func NodeView(pluginID, id string, n *structs.Node, now time.Time, withMeta bool) abi.NodeView {
	nv := abi.NodeView{ID: id, Status: StatusGone}
	if n == nil {
		return nv
	}
	nv.Status = string(n.Status)
	if !n.LastSeen.IsZero() {
		nv.LastSeenAgeMs = max(now.Sub(n.LastSeen).Milliseconds(), 0)
	}
	if withMeta {
		nv.Meta = n.Meta
	}
	if np := n.Plugins[pluginID]; np != nil {
		nv.ExternalID = np.ExternalNodeID
	}
	return nv
}

// PluginView describes plugin pluginID (plugin, nil when not registered)
// as node n (nil when gone) runs it.
func PluginView(pluginID string, plugin *structs.Plugin, n *structs.Node) abi.PluginView {
	pv := abi.PluginView{ID: pluginID}
	if plugin != nil {
		pv.Provider = plugin.Provider
		pv.PublishUnpublish = plugin.Capabilities.PublishUnpublish
	}
	if n != nil {
		if np := n.Plugins[pluginID]; np != nil {
			pv.StageUnstage = np.StageUnstage
		}
	}
	return pv
}
