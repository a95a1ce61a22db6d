package main

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/volhost/volhost/host/api"
	"github.com/volhost/volhost/host/api/client"
	"github.com/volhost/volhost/host/structs"
)

const namespaceHelp = `
  -namespace=<ns>
    The volume's namespace. Overrides the VOLHOST_NAMESPACE environment
    variable. Default: "default".
`

// envNamespace names the environment variable -namespace defaults to, as
// the reference scheduler's CLI reads its own.
const envNamespace = "VOLHOST_NAMESPACE"

// namespaceFlag adds -namespace, defaulting to VOLHOST_NAMESPACE, else def
// ("default" for one volume, "" for every namespace of a list).
func (m *Meta) namespaceFlag(fs *flag.FlagSet, def string) *string {
	if m.Env != nil {
		if v := m.Env(envNamespace); v != "" {
			def = v
		}
	}
	return fs.String("namespace", def, "")
}

// optBool is a bool flag that knows whether it was given: -stuck lists
// stuck volumes, -stuck=false the others, and no flag every volume.
type optBool struct{ v *bool }

func (o *optBool) String() string {
	if o.v == nil {
		return ""
	}
	return strconv.FormatBool(*o.v)
}

func (o *optBool) Set(s string) error {
	b, err := strconv.ParseBool(s)
	if err != nil {
		return fmt.Errorf("want true or false, got %q", s)
	}
	o.v = &b
	return nil
}

func (o *optBool) IsBoolFlag() bool { return true }

// claimStates are the values of volume status -claim-state.
var claimStates = append(append([]structs.ClaimState{}, structs.ClaimStates...), "unclaimed")

// VolumeRegisterCommand is `volhost volume register FILE`.
type VolumeRegisterCommand struct{ *Meta }

func (c *VolumeRegisterCommand) Synopsis() string { return "Register volumes from a spec file" }
func (c *VolumeRegisterCommand) Help() string {
	return helpText("volume register [options] FILE", `
  Register (or update) the CSI volumes described in FILE. FILE is HCL, or
  JSON in HCL's JSON syntax, and holds one or more volume blocks:

    volume "vol1" {
      namespace       = "default"            # optional
      external_id     = "projects/p/zones/z/disks/d1"
      plugin_id       = "gce-pd"
      access_mode     = "single-node-writer"
      attachment_mode = "file-system"
      fs_type         = "ext4"               # optional
      mount_flags     = ["noatime"]          # optional
      secrets         = { key = "value" }    # optional; never shown by reads
      parameters      = {}                   # optional
      context         = {}                   # optional
    }

  An unknown argument or block is an error naming the file and line.`, false)
}

func (c *VolumeRegisterCommand) Run(args []string) int {
	return registerFile(c.Meta, "volume", args, loadVolumes, func(ctx context.Context, cl *client.Client, vols []*structs.Volume) error {
		// The log index is not printed: it is noise to an operator
		// who just registered a volume; API users read it from the X-Volhost-Index header.
		if _, err := cl.RegisterVolumes(ctx, vols); err != nil {
			return err
		}
		for _, v := range vols {
			c.Ui.Output(fmt.Sprintf("Registered volume %q in namespace %q", v.ID, v.Namespace))
		}
		return nil
	})
}

// VolumeStatusCommand is `volhost volume status [ID]`.
type VolumeStatusCommand struct{ *Meta }

func (c *VolumeStatusCommand) Synopsis() string { return "Show volumes, or one volume's claims" }
func (c *VolumeStatusCommand) Help() string {
	return helpText("volume status [options] [ID]", `
  Without ID, list the registered volumes (all namespaces unless -namespace
  is given). With ID, show the volume, each claim with its release state,
  attempts, last error and next attempt, why the volume is stuck if it is,
  and whether "volume deregister -force" is allowed now.

  -plugin=<id>
    Only list volumes of this CSI plugin.

  -stuck
    Only list stuck volumes (-stuck=false: only the others).

  -claim-state=<state>
    Only list volumes with a claim in this state: publishing, taken,
    node-detached, controller-detached, ready-to-free, or unclaimed for
    volumes without claims.

  -search=<text>
    Only list volumes whose ID or name contains the text.

  -namespace=<ns>
    Only list this namespace's volumes; with ID, the volume's namespace.
    Overrides the VOLHOST_NAMESPACE environment variable. Default: every
    namespace for a list, "default" for one volume.
`, true)
}

func (c *VolumeStatusCommand) Run(args []string) int {
	fs := c.flagSet("volume status", true)
	ns := c.namespaceFlag(fs, "")
	plugin := fs.String("plugin", "", "")
	var stuck optBool
	fs.Var(&stuck, "stuck", "")
	claimState := fs.String("claim-state", "", "")
	search := fs.String("search", "", "")
	rest, cl, ctx, stop, err := c.begin(fs, args, 0, 1, "volume status [options] [ID]")
	if err != nil {
		return c.fail(err)
	}
	defer stop()
	if *claimState != "" && !slices.Contains(claimStates, structs.ClaimState(*claimState)) {
		return c.fail(badChoice("-claim-state", *claimState, claimStates...))
	}
	filtered := stuck.v != nil || *claimState != "" || *search != "" || *plugin != ""
	if len(rest) > 0 && filtered {
		return c.fail(fmt.Errorf("-plugin, -stuck, -claim-state and -search filter the list: give them without an ID"))
	}
	if len(rest) == 0 {
		vols, _, err := cl.VolumesWhere(ctx, client.VolumeQuery{Namespace: *ns, PluginID: *plugin,
			ClaimState: *claimState, Stuck: stuck.v, Search: *search}, nil)
		if err != nil {
			return c.fail(err)
		}
		if c.json {
			return c.printJSON(vols)
		}
		if len(vols) == 0 {
			if filtered {
				c.Ui.Output("No volumes match")
				return 0
			}
			c.Ui.Output("No volumes")
			return 0
		}
		rows := [][]string{{"ID", "Namespace", "Plugin", "Access Mode", "Claims", "Stuck"}}
		for _, v := range vols {
			stuck := "no"
			if v.Stuck != nil {
				stuck = "yes: " + v.Stuck.Reason
			}
			rows = append(rows, []string{v.ID, v.Namespace, v.PluginID, string(v.AccessMode), claimSummary(v), stuck})
		}
		c.Ui.Output(table(rows))
		return 0
	}
	if *ns == "" {
		*ns = api.DefaultNamespace
	}
	v, _, err := cl.Volume(ctx, *ns, rest[0], nil)
	if err != nil {
		return c.fail(err)
	}
	if c.json {
		return c.printJSON(v)
	}
	c.Ui.Output(formatVolume(v))
	return 0
}

// claimSummary counts claims by state, e.g. "2 (1 taken, 1 node-detached)".
func claimSummary(v *structs.Volume) string {
	if len(v.Claims) == 0 {
		return "0"
	}
	counts := map[structs.ClaimState]int{}
	for _, cl := range v.Claims {
		counts[cl.State]++
	}
	var parts []string
	for _, s := range structs.ClaimStates {
		if counts[s] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", counts[s], s))
		}
	}
	return fmt.Sprintf("%d (%s)", len(v.Claims), strings.Join(parts, ", "))
}

func formatVolume(v *api.VolumeResponse) string {
	force := "allowed now (every allocation is terminal or gone)"
	if !v.ForceDeregister.Allowed {
		force = "refused: live allocation(s) " + strings.Join(v.ForceDeregister.LiveAllocs, ", ")
	}
	var b strings.Builder
	b.WriteString(kv([][2]string{
		{"ID", v.ID},
		{"Namespace", v.Namespace},
		{"Name", orDash(v.Name)},
		{"External ID", v.ExternalID},
		{"Plugin ID", v.PluginID},
		{"Access Mode", string(v.AccessMode)},
		{"Attachment Mode", string(v.AttachmentMode)},
		{"Write Allocs", orDash(strings.Join(sorted(v.Allocs(structs.ClaimWrite)), ", "))},
		{"Read Allocs", orDash(strings.Join(sorted(v.Allocs(structs.ClaimRead)), ", "))},
		{"Force Deregister", force},
	}))
	if s := v.Stuck; s != nil {
		b.WriteString("\n\nSTUCK\n")
		culprit := s.Module
		if culprit == "" && s.CodeName != "" {
			culprit = "CSI driver (" + s.CodeName + ")"
		}
		b.WriteString(kv([][2]string{
			{"Reason", s.Reason},
			{"Since", fmtTime(s.Since)},
			{"Alloc", orDash(s.AllocID)},
			{"Node", orDash(s.NodeID)},
			{"Failing", orDash(culprit)},
			{"Fault", orDash(s.Fault)},
			{"Attempts", strconv.Itoa(s.Attempts)},
		}))
	}
	b.WriteString("\n\nClaims\n")
	if len(v.Claims) == 0 {
		b.WriteString("No claims")
		return b.String()
	}
	rows := [][]string{{"Alloc ID", "Node ID", "Mode", "State", "Attempts", "Next Attempt", "Last Error"}}
	for _, id := range v.ClaimIDs() {
		cl := v.Claims[id]
		lastErr := "-"
		next := fmtTime(cl.NextAttempt)
		switch {
		case cl.Hold != nil:
			// A hold is what the claim waits for now: say who, why and
			// until when ("taken 0 - -" told the operator nothing). It
			// wins over a last error, which is older (a failed attempt,
			// then its node went gone): showing that error with a Next
			// Attempt in the past hid the hold and its remedy.
			lastErr = "held by " + cl.Hold.Holder() + ": " + cl.Hold.Reason
			if cl.LastError != nil {
				lastErr += " (before: attempt " + strconv.Itoa(cl.Attempts) + " failed: " + cl.LastError.Error() + ")"
			}
			next = "when it changes"
			if !cl.Hold.Until.IsZero() {
				next = fmtTime(cl.Hold.Until)
			}
		case cl.LastError != nil:
			lastErr = cl.LastError.Error()
		}
		state := string(cl.State)
		switch {
		case cl.UnstageInDoubt() && cl.LastError != nil:
			// New claims on its machine wait for this one's answer.
			state += " (unstage in doubt: claims on its machine wait)"
		case cl.DetachInDoubt() && cl.LastError != nil:
			state += " (detach in doubt: claims on its machine wait)"
		case cl.State == structs.ClaimTaken && cl.NodeUnpublished:
			state += " (unpublished, unstage next)" // NodeUnpublish committed, NodeUnstage next
		}
		if cl.Restored {
			state += " (restored: staging in doubt)"
		}
		rows = append(rows, []string{cl.AllocID, cl.NodeID, string(cl.Mode), state,
			strconv.Itoa(cl.Attempts), next, oneLine(lastErr)})
	}
	b.WriteString(table(rows))
	return b.String()
}

func sorted(s []string) []string {
	slices.Sort(s)
	return s
}

// VolumeClaimCommand is `volhost volume claim`.
type VolumeClaimCommand struct{ *Meta }

func (c *VolumeClaimCommand) Synopsis() string { return "Claim a volume for an allocation" }
func (c *VolumeClaimCommand) Help() string {
	return helpText("volume claim [options] -alloc ALLOC -node NODE -mode read|write ID", `
  Claim volume ID for an allocation on a node: the agent checks capacity
  and access mode, publishes the volume through the CSI plugin and records
  the claim (state "taken").

  -alloc=<id>
    The allocation taking the claim (required).

  -node=<id>
    The node the allocation runs on (required).

  -mode=read|write
    The claim mode (required).

  -access-mode=<mode>
    The CSI access mode of the claim (default: the volume's), one of
    single-node-reader-only, single-node-writer, multi-node-reader-only,
    multi-node-single-writer, multi-node-multi-writer.

  -attachment-mode=file-system|block-device
    How the volume is presented (default: the volume's).
`+namespaceHelp, false)
}

func (c *VolumeClaimCommand) Run(args []string) int {
	fs := c.flagSet("volume claim", false)
	ns := c.namespaceFlag(fs, api.DefaultNamespace)
	alloc := fs.String("alloc", "", "")
	node := fs.String("node", "", "")
	mode := fs.String("mode", "", "")
	access := fs.String("access-mode", "", "")
	attach := fs.String("attachment-mode", "", "")
	usage := "volume claim [options] -alloc ALLOC -node NODE -mode read|write ID"
	rest, err := c.parse(fs, args, 1, 1, usage)
	if err != nil {
		return c.fail(err)
	}
	switch {
	case *alloc == "":
		return c.fail(fmt.Errorf("-alloc is required (usage: volhost %s)", usage))
	case *node == "":
		return c.fail(fmt.Errorf("-node is required (usage: volhost %s)", usage))
	case !structs.ClaimMode(*mode).Valid():
		return c.fail(badChoice("-mode", *mode, structs.ClaimRead, structs.ClaimWrite))
	case *access != "" && !structs.AccessMode(*access).Valid():
		return c.fail(badChoice("-access-mode", *access, structs.AccessModes...))
	case *attach != "" && !structs.AttachmentMode(*attach).Valid():
		return c.fail(badChoice("-attachment-mode", *attach, structs.AttachmentModes...))
	}
	cl, err := c.client()
	if err != nil {
		return c.fail(err)
	}
	ctx, stop := c.context()
	defer stop()
	claim, err := cl.ClaimVolume(ctx, &structs.ClaimRequest{Namespace: *ns, VolumeID: rest[0],
		AllocID: *alloc, NodeID: *node, Mode: structs.ClaimMode(*mode),
		AccessMode: structs.AccessMode(*access), AttachmentMode: structs.AttachmentMode(*attach)})
	if err != nil {
		return c.fail(err)
	}
	c.Ui.Output(fmt.Sprintf("Volume %q claimed by allocation %q on node %q (%s, state %s)",
		rest[0], claim.AllocID, claim.NodeID, claim.Mode, claim.State))
	return 0
}

// VolumeDeregisterCommand is `volhost volume deregister [-force] ID`.
type VolumeDeregisterCommand struct{ *Meta }

func (c *VolumeDeregisterCommand) Synopsis() string { return "Deregister a volume" }
func (c *VolumeDeregisterCommand) Help() string {
	return helpText("volume deregister [options] ID", `
  Remove volume ID. Refused while the volume has claims that are not yet
  released.

  -force
    Remove the volume even though claims remain, without any CSI call.
    Allowed only when every allocation holding a claim is terminal or gone.
    The attachments that may be left on nodes are printed and kept as
    leftovers ("volume leftovers") until cleared.
`+namespaceHelp, false)
}

func (c *VolumeDeregisterCommand) Run(args []string) int {
	fs := c.flagSet("volume deregister", false)
	ns := c.namespaceFlag(fs, api.DefaultNamespace)
	force := fs.Bool("force", false, "")
	rest, cl, ctx, stop, err := c.begin(fs, args, 1, 1, "volume deregister [options] ID")
	if err != nil {
		return c.fail(err)
	}
	defer stop()
	resp, err := cl.DeregisterVolume(ctx, *ns, rest[0], *force)
	if err != nil {
		return c.fail(err)
	}
	c.Ui.Output(fmt.Sprintf("Deregistered volume %q in namespace %q", rest[0], *ns))
	if len(resp.Leftovers) > 0 {
		c.Ui.Output(fmt.Sprintf("\nAttachments that may be left behind (%d), listed by \"volhost volume leftovers\":", len(resp.Leftovers)))
		c.Ui.Output(leftoverTable(resp.Leftovers))
	}
	return 0
}

func leftoverTable(left []*structs.Leftover) string {
	rows := [][]string{{"ID", "Node ID", "External Node ID", "External Volume ID", "State Reached", "In Doubt", "Reason"}}
	for _, l := range left {
		rows = append(rows, []string{l.ID, l.NodeID, orDash(l.ExternalNodeID), orDash(l.ExternalID), string(l.State), orDash(l.InDoubt), orDash(l.Reason)})
	}
	return table(rows)
}

// VolumeDetachCommand is `volhost volume detach ID NODE`.
type VolumeDetachCommand struct{ *Meta }

func (c *VolumeDetachCommand) Synopsis() string { return "Release a volume's claims on one node now" }
func (c *VolumeDetachCommand) Help() string {
	return helpText("volume detach [options] ID NODE", `
  Run the release steps now for the claims of volume ID on NODE whose
  allocations are terminal or gone. Fails, without doing anything, when a
  live allocation on NODE still uses the volume.
`+namespaceHelp, false)
}

func (c *VolumeDetachCommand) Run(args []string) int {
	fs := c.flagSet("volume detach", false)
	ns := c.namespaceFlag(fs, api.DefaultNamespace)
	rest, cl, ctx, stop, err := c.begin(fs, args, 2, 2, "volume detach [options] ID NODE")
	if err != nil {
		return c.fail(err)
	}
	defer stop()
	res, err := cl.DetachVolume(ctx, *ns, rest[0], rest[1])
	if err != nil {
		return c.fail(err)
	}
	if len(res.Claims) == 0 {
		c.Ui.Output(fmt.Sprintf("Volume %q has no releasable claims on node %q", rest[0], rest[1]))
		return 0
	}
	rows := [][]string{{"Alloc ID", "State", "Attempts", "Last Error"}}
	failed := false
	for _, cl := range res.Claims {
		lastErr := "-"
		if cl.LastError != nil {
			lastErr = oneLine(cl.LastError.Error())
		}
		if cl.State != structs.ClaimReadyToFree {
			failed = true
		}
		rows = append(rows, []string{cl.AllocID, string(cl.State), strconv.Itoa(cl.Attempts), lastErr})
	}
	c.Ui.Output(fmt.Sprintf("Detach of volume %q on node %q: %d of %d claim(s) released", rest[0], rest[1], len(res.Released), len(res.Claims)))
	c.Ui.Output(table(rows))
	if failed {
		// A claim that did not finish is not a silent success (the
		// reference system's `volume detach` reports success after
		// skipping steps).
		c.Ui.Error("Error: not every claim was released; see the last errors above")
		return 1
	}
	return 0
}

// VolumeLeftoversCommand is `volhost volume leftovers`.
type VolumeLeftoversCommand struct{ *Meta }

func (c *VolumeLeftoversCommand) Synopsis() string {
	return "List or clear attachments left by forced deregistration"
}
func (c *VolumeLeftoversCommand) Help() string {
	return helpText("volume leftovers [options]", `
  List the attachments that force-deregistered volumes may have left on
  nodes (node, external IDs, the release state the claim had reached, and
  the NodeUnstage or ControllerUnpublish that was sent with no answer and
  may still run). Until a leftover short of controller-detached is
  cleared, a claim of its disk is refused on its machine, and on every
  machine for a single-node volume. Clean them up on the storage side,
  then clear them here.

  -clear=<id>
    Forget one leftover by ID (repeatable).

  -clear-all
    Forget every leftover.`, true)
}

type idList []string

func (s *idList) String() string     { return strings.Join(*s, ",") }
func (s *idList) Set(v string) error { *s = append(*s, v); return nil }

func (c *VolumeLeftoversCommand) Run(args []string) int {
	fs := c.flagSet("volume leftovers", true)
	var clearIDs idList
	fs.Var(&clearIDs, "clear", "")
	all := fs.Bool("clear-all", false, "")
	if _, err := c.parse(fs, args, 0, 0, "volume leftovers [options]"); err != nil {
		return c.fail(err)
	}
	if *all && len(clearIDs) > 0 {
		return c.fail(fmt.Errorf("-clear and -clear-all cannot be combined"))
	}
	cl, err := c.client()
	if err != nil {
		return c.fail(err)
	}
	ctx, stop := c.context()
	defer stop()
	if *all || len(clearIDs) > 0 {
		if _, err := cl.ClearLeftovers(ctx, clearIDs, *all); err != nil {
			return c.fail(err)
		}
		if *all {
			c.Ui.Output("Cleared every leftover")
		} else {
			c.Ui.Output(fmt.Sprintf("Cleared %d leftover(s)", len(clearIDs)))
		}
		return 0
	}
	left, _, err := cl.Leftovers(ctx, nil)
	if err != nil {
		return c.fail(err)
	}
	if c.json {
		return c.printJSON(left)
	}
	if len(left) == 0 {
		c.Ui.Output("No leftovers")
		return 0
	}
	c.Ui.Output(leftoverTable(left))
	return 0
}
