package csi_test

import (
	"github.com/volhost/volhost/host/csi"
	"github.com/volhost/volhost/watcher"
)

// The watcher drives releases through these interfaces; the agent hands it
// a *csi.Client for both.
var (
	_ watcher.NodeCSI       = (*csi.Client)(nil)
	_ watcher.ControllerCSI = (*csi.Client)(nil)
)
