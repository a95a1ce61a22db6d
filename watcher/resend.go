package watcher

import (
	"context"

	"github.com/volhost/volhost/host/structs"
)

// markResent commits, before a destructive step (NodeUnstageVolume,
// ControllerUnpublishVolume) is sent again, that the claim's last error,
// a driver's answer to that same step that said the call was over, no
// longer says so (structs.ClaimError.Resent). Without it, a leader that
// sends the retry and dies or steps down before the answer leaves the old
// answer committed: the next leader reads "the driver is done", lets a
// claim on the machine stage and publish (host/state validateClaimMachine),
// and the retry's unmount or detach ends under that claim's mount. The
// write is needed only after such an answer (inDoubt false): a first call
// follows a checkpoint that already leaves the step in doubt
// (node_unpublished, node-detached). Call it holding the volume's lock.
func (p *pass) markResent(ctx context.Context, c *structs.Claim, inDoubt bool) error {
	if inDoubt || c.LastError == nil {
		return nil
	}
	e := *c.LastError
	e.Resent = true
	c.LastError = &e
	c.ModifyTime = p.now
	return p.checkpoint(ctx, c, stepFlags{})
}
