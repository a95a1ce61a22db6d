package csi_test

import (
	"github.com/volhost/volhost/host/csi"
	"github.com/volhost/volhost/watcher"
	"github.com/volhost/volhost/watcher/attach"
)

// The claim path and the watcher drive node and controller steps through
// these interfaces; the agent hands them a *csi.Client (under
// host/nodestep for the node steps).
var (
	_ attach.NodeSteps      = (*csi.Client)(nil)
	_ watcher.ControllerCSI = (*csi.Client)(nil)
)
