package nomad

import (
	"fmt"
	"slices"
	"strings"

	"github.com/volhost/volhost/host/structs"
)

// Nomad's client statuses (api.AllocClientStatus*) and node statuses.
const (
	clientPending  = "pending"
	clientRunning  = "running"
	clientComplete = "complete"
	clientFailed   = "failed"
	clientLost     = "lost"
	clientUnknown  = "unknown" // a disconnected client (max_client_disconnect): its tasks may run

	// clientVanished is no Nomad status: the bridge's for an allocation
	// Nomad no longer lists (garbage-collected, or its state lost).
	clientVanished = "vanished"

	nodeInit         = "initializing"
	nodeReady        = "ready"
	nodeDown         = "down"
	nodeDisconnected = "disconnected"
)

// nodeView is what the status rule needs to know of an allocation's node.
type nodeView struct {
	// InNomad: Nomad still lists the node (false: removed by system gc).
	InNomad bool
	// Status is Nomad's node status.
	Status string
	// Fenced: an operator (or a module) attested in volhost that the node
	// is off.
	Fenced bool
}

// verdict is what the bridge mirrors of one Nomad allocation.
type verdict struct {
	// Status is the volhost client status to mirror.
	Status structs.AllocClientStatus
	// Held: the allocation is lost but may still run; keep it live in
	// volhost (Status is empty) and say why.
	Held   bool
	Reason string
}

// decide is the bridge's one rule for an allocation's status. It reads the
// client status only: an allocation whose desired status is stop but whose
// client still reports pending or running is live — during shutdown_delay
// the task keeps running (pending, "Waiting for shutdown delay"), and
// Nomad itself unmounted volumes there by going by the desired status
// (hashicorp/nomad #24130, #25819, fixed by #26831).
//
// Lost is not stopped: the server marks a dead client's allocations lost
// within milliseconds of the node going down while the tasks there keep
// running, so a lost allocation is released only when its node is fenced
// (an attestation that it is off) or is gone from Nomad. A node that comes
// back does not end the hold: Nomad reports it ready at its first
// heartbeat, before its client has stopped what it lost (measured with
// v1.11.3: a paused client's task still ran about 90 ms after a release
// started on "ready" sent NodeUnpublish, a restarted client's about 170
// ms after the node was ready, and a task may take its whole
// kill_timeout). The client then reports the allocation
// again (running with desired stop, then complete), and that report,
// read by the same rule as any other, ends it. An allocation that vanished
// from Nomad while its node is ready has ended: its client stops what the
// server no longer lists.
func decide(clientStatus string, node nodeView) verdict {
	switch clientStatus {
	case clientPending:
		return verdict{Status: structs.AllocPending}
	case clientRunning, clientUnknown:
		return verdict{Status: structs.AllocRunning}
	case clientComplete:
		return verdict{Status: structs.AllocComplete}
	case clientFailed:
		return verdict{Status: structs.AllocFailed}
	case clientLost, clientVanished:
		switch {
		case node.Fenced:
			return verdict{Status: structs.AllocLost, Reason: "its node is fenced"}
		case !node.InNomad:
			return verdict{Status: structs.AllocLost, Reason: "its node is gone from Nomad"}
		case node.Status == nodeReady && clientStatus == clientVanished:
			return verdict{Status: structs.AllocLost, Reason: "its node is up and its client stops what Nomad no longer lists"}
		case node.Status == nodeReady:
			return verdict{Held: true, Reason: "lost, and its node is back: its client may still be stopping its tasks; held until the client reports the allocation again, or the node is fenced (volhost node fence) or gone"}
		}
		return verdict{Held: true, Reason: fmt.Sprintf("%s on a node Nomad reports %s: its tasks may still run there; held until the node is fenced (volhost node fence) or gone, or its client reports the allocation again", clientStatus, orUnknown(node.Status))}
	}
	// A status this bridge does not know: keep the allocation live rather
	// than release under something that may run.
	return verdict{Held: true, Reason: fmt.Sprintf("unknown Nomad client status %q: held as live", clientStatus)}
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// nodeDownInNomad reports whether Nomad's node status means the node
// stopped answering (volhost marks it down, with node steps held until a
// fence, exactly as for a node agent's lost heartbeats).
func nodeDownInNomad(status string) bool {
	return status == nodeDown || status == nodeDisconnected
}

// volumeRequest is one volume a task group declares in its meta.
type volumeRequest struct {
	Key       string // the meta key, for messages
	Namespace string
	VolumeID  string
	Mode      structs.ClaimMode
}

func (r volumeRequest) ref() string { return r.Namespace + "/" + r.VolumeID }

// parseVolumes reads the volumes a task group declares: every meta key
// that starts with prefix ("volhost_volume_", then any name unique in the
// group) has the value "[NAMESPACE/]VOLUME[:read|write]"; the namespace
// defaults to the allocation's Nomad namespace and the mode to write.
// Keys are read in sorted order; a bad value is an error naming its key,
// and the other keys are still returned.
func parseVolumes(meta map[string]string, prefix, allocNamespace string) ([]volumeRequest, []error) {
	var keys []string
	for k := range meta {
		if strings.HasPrefix(k, prefix) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	var out []volumeRequest
	var errs []error
	seen := map[string]string{}
	for _, k := range keys {
		r, err := parseVolume(k, meta[k], allocNamespace)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if other, dup := seen[r.ref()]; dup {
			errs = append(errs, fmt.Errorf("meta %s: volume %s is already declared by %s", k, r.ref(), other))
			continue
		}
		seen[r.ref()] = k
		out = append(out, r)
	}
	return out, errs
}

func parseVolume(key, val, allocNamespace string) (volumeRequest, error) {
	r := volumeRequest{Key: key, Namespace: allocNamespace, Mode: structs.ClaimWrite}
	v := strings.TrimSpace(val)
	if i := strings.LastIndexByte(v, ':'); i >= 0 {
		r.Mode = structs.ClaimMode(v[i+1:])
		v = v[:i]
		if !r.Mode.Valid() {
			return r, fmt.Errorf("meta %s = %q: mode must be read or write, got %q", key, val, r.Mode)
		}
	}
	if i := strings.IndexByte(v, '/'); i >= 0 {
		r.Namespace, v = v[:i], v[i+1:]
	}
	r.VolumeID = v
	if r.Namespace == "" {
		r.Namespace = "default"
	}
	if err := structs.ValidateID("volume", r.VolumeID); err != nil {
		return r, fmt.Errorf("meta %s = %q: %w", key, val, err)
	}
	if err := structs.ValidateID("namespace", r.Namespace); err != nil {
		return r, fmt.Errorf("meta %s = %q: %w", key, val, err)
	}
	return r, nil
}

// volhostNodeID is the volhost node an allocation's Nomad node maps to.
func volhostNodeID(from string, nodeID, nodeName string) string {
	if from == NodeIDFromID {
		return nodeID
	}
	return nodeName
}
