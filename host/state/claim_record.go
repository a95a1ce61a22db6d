package state

import "github.com/volhost/volhost/host/structs"

// A claim's record of its publish (what its release undoes) is written
// once, when the claim is committed, and no checkpoint changes it.

// recordPublish completes the record of new claim c of v: Unattached when
// the volume's plugin has no PUBLISH_UNPUBLISH_VOLUME, so the claim path
// sent no ControllerPublishVolume and the release sends no
// ControllerUnpublishVolume, whatever the plugin says later. Read here,
// in the write that commits the claim, from the plugin row the claim was
// validated against.
func (w *writer) recordPublish(v *structs.Volume, c *structs.Claim) error {
	p, err := w.snap.PluginByID(nil, v.PluginID)
	if err != nil {
		return err
	}
	if p == nil {
		return structs.NotFound("plugin", v.PluginID)
	}
	c.Unattached = c.Unattached || !p.Capabilities.PublishUnpublish
	return nil
}

// keepPublishRecord makes checkpoint c carry prev's record of the publish:
// a release works on a copy of the claim, and a copy read before a restore
// marked the claim, or a release that rewrote a path, must not change what
// a later release undoes. Restored is never cleared.
func keepPublishRecord(prev, c *structs.Claim) {
	c.ExternalNodeID = prev.ExternalNodeID
	c.StagingPath, c.TargetPath = prev.StagingPath, prev.TargetPath
	c.Unattached = prev.Unattached
	c.Restored = c.Restored || prev.Restored
}

// recordLegacyPublish completes, in a restored volume row, the record of
// claims written before Claim.Unattached existed: a claim of a plugin
// without PUBLISH_UNPUBLISH_VOLUME attached nothing (the claim path sends
// no ControllerPublishVolume for it). For a row written since, this
// changes nothing: the store refuses a plugin registration that drops the
// capability while a claim holds an attachment (validatePluginUnderClaims).
// Without it, such a claim's release could neither send a
// ControllerUnpublish to a plugin that has no controller nor skip one the
// record says is due. v is a row just decoded and validated (its plugin is
// in view, its claims are not null).
func recordLegacyPublish(view *Snapshot, v *structs.Volume) error {
	if len(v.Claims) == 0 {
		return nil
	}
	p, err := view.PluginByID(nil, v.PluginID)
	if err != nil || p == nil || p.Capabilities.PublishUnpublish {
		return err
	}
	for _, c := range v.Claims {
		c.Unattached = true
	}
	return nil
}
