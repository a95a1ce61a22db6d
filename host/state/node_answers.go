package state

import (
	"fmt"
	"maps"
	"slices"
	"unicode/utf8"

	"github.com/volhost/volhost/host/structs"
)

// Node plugins that do not answer their agent's probe.
//
// A node agent probes each of its plugins when it says hello. A plugin
// whose probe fails (its socket away while the driver restarts, not
// ready, no answer in time) used to fail the hello: the node went down
// with its plugin, and the claims of its other plugins with it. Now the
// agent registers the node with the plugin's ProbeError instead, and this
// is what the store makes of such an entry, on every path a node is
// registered by:
//
//   - it keeps what the plugin last answered (its external node ID and
//     capabilities): the machine did not change because its driver is
//     restarting, and an entry without its ID would drop the machine from
//     the machine index, where a second node ID registering the same
//     machine is refused (validateMachineIdentity);
//   - the change is an event on the node, both ways, so `volhost events`
//     says when a plugin stopped answering and when it came back, and
//     wakes the volumes claimed on the node: their releases' node steps
//     wait while the plugin does not answer (watcher unansweredHold).
//
// A claim on a plugin that is not answering is refused (validateClaim),
// and a release's node steps wait for it to answer.

// keepLastAnswers fills each entry of n whose probe failed with what the
// same plugin answered in old, the node as the store holds it (nil: none).
func keepLastAnswers(old, n *structs.Node) {
	if old == nil {
		return
	}
	for id, np := range n.Plugins {
		if np == nil || np.Answering() {
			continue
		}
		if op := old.Plugins[id]; op != nil {
			np.SetAnswers(op.Answers())
		}
	}
}

// validateUnansweredUnderClaims refuses an entry that did not answer and
// has nothing kept for it (no node under the ID held its answers) while
// the node ID holds claims of that plugin recorded on a machine: nothing
// says the node is that machine, and the node steps of those claims'
// releases would go to whichever machine the agent's socket reaches. An
// answering entry is held to the recorded machine (validateHeldClaimMachine);
// this one registers once its plugin answers. Before, an agent on another
// machine that took a deregistered node's ID with its driver slow to
// answer had the old claims' NodeUnstage run under its own allocation.
func validateUnansweredUnderClaims(snap *Snapshot, old, n *structs.Node) error {
	for _, id := range slices.Sorted(maps.Keys(n.Plugins)) {
		np := n.Plugins[id]
		if np == nil || np.Answering() || np.ExternalNodeID != "" {
			continue
		}
		var was string
		if old != nil {
			if op := old.Plugins[id]; op != nil {
				was = op.ExternalNodeID
			}
		}
		err := heldClaimsOn(snap, n.ID, func(v *structs.Volume, c *structs.Claim) error {
			if v.PluginID != id {
				return nil
			}
			if rec := c.ReleaseNodeID(was); rec != "" {
				return structs.Conflict("node %q: plugin %q did not answer its node agent's probe (%s), so nothing says the node is the machine of external node ID %q, "+
					"where the claim of allocation %q on volume %q is held: the node registers once the plugin answers as that machine",
					n.ID, id, np.ProbeError, rec, c.AllocID, volName(v.Namespace, v.ID))
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// validateProbeError bounds an entry's probe error (snapshot rows too).
func validateProbeError(field string, np *structs.NodePlugin) error {
	switch {
	case len(np.ProbeError) > structs.MaxProbeErrorLength:
		return structs.Invalid(field+".probe_error", "is %d bytes long, at most %d allowed", len(np.ProbeError), structs.MaxProbeErrorLength)
	case !utf8.ValidString(np.ProbeError):
		return structs.Invalid(field+".probe_error", "is not valid UTF-8")
	}
	return nil
}

// validateUnanswered refuses a registration whose entry both failed its
// probe and reports what a probe answers: the answers kept for it are the
// store's (keepLastAnswers), never the registration's.
func validateUnanswered(n *structs.Node) error {
	for _, id := range slices.Sorted(maps.Keys(n.Plugins)) {
		np := n.Plugins[id]
		if np != nil && !np.Answering() && np.Answers() != (structs.NodePluginAnswers{}) {
			return structs.Invalid(fmt.Sprintf("node.plugins[%s]", id),
				"has a probe_error, so nothing was probed: it cannot report external_node_id, stage_unstage, max_volumes or controller_service")
		}
	}
	return nil
}

// probeEvents records each plugin of n that stopped or started answering
// its agent's probe since old (a plugin new to the node counts from
// answering), and says whether one did.
func (w *writer) probeEvents(old, n *structs.Node) (changed bool, err error) {
	for _, id := range slices.Sorted(maps.Keys(n.Plugins)) {
		np := n.Plugins[id]
		was := true
		if old != nil {
			if op := old.Plugins[id]; op != nil {
				was = op.Answering()
			}
		}
		if np == nil || np.Answering() == was {
			continue
		}
		ev := &structs.Event{Type: structs.EventNodeStatus, NodeID: n.ID, PluginID: id,
			Message: fmt.Sprintf("node %s: plugin %s answers its node agent's probe again", n.ID, id),
			Fields:  map[string]string{"plugin": id, "probe": "answering"}}
		if !np.Answering() {
			ev.Message = fmt.Sprintf("node %s: plugin %s did not answer its node agent's probe: %s", n.ID, id, np.ProbeError)
			ev.Fields["probe"], ev.Fields["error"] = "failed", np.ProbeError
		}
		if err := w.event(ev); err != nil {
			return false, err
		}
		changed = true
	}
	return changed, nil
}
