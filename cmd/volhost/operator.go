package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/volhost/volhost/host/api"
	"github.com/volhost/volhost/host/api/client"
	"github.com/volhost/volhost/host/cluster"
)

// operatorDo sends one request to the agent's API and returns the answer.
// Errors the agent answers come back as *client.APIError, so fail() prints
// them like every other command's.
func (m *Meta) operatorDo(ctx context.Context, method, path string, q url.Values, body io.Reader) (*http.Response, error) {
	cl, err := m.client()
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(cl.Address())
	if err != nil {
		return nil, err
	}
	u.Path = strings.TrimSuffix(u.Path, "/") + path
	u.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return nil, err
	}
	// The API refuses writes without a JSON content type (CSRF guard);
	// the snapshot upload is the one octet-stream route.
	if method == http.MethodPut || method == http.MethodPost {
		ct := "application/json"
		if path == "/v1/operator/snapshot" {
			ct = "application/octet-stream"
		}
		req.Header.Set("Content-Type", ct)
	}
	cl.Authorize(req)
	resp, err := cl.HTTPClient().Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
		var er api.ErrorResponse
		if json.Unmarshal(raw, &er) != nil || er.Error == "" {
			er.Error = strings.TrimSpace(string(raw))
			if er.Error == "" {
				er.Error = resp.Status
			}
		}
		return nil, &client.APIError{StatusCode: resp.StatusCode, Message: er.Error, Field: er.Field, Code: er.Code}
	}
	return resp, nil
}

// operatorJSON runs operatorDo and decodes a JSON answer into out.
func (m *Meta) operatorJSON(ctx context.Context, method, path string, q url.Values, out any) error {
	resp, err := m.operatorDo(ctx, method, path, q, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("%s %s: decode answer: %w", method, path, err)
	}
	return nil
}

// RaftListPeersCommand is `volhost operator raft list-peers`.
type RaftListPeersCommand struct{ *Meta }

func (c *RaftListPeersCommand) Synopsis() string {
	return "List the raft peers (servers) of the cluster"
}
func (c *RaftListPeersCommand) Help() string {
	return helpText("operator raft list-peers [options]", `
  List the servers of the raft configuration: ID, raft address, HTTP API
  address, whether it leads, whether it votes and the volhost version it
  advertised, then the log features the cluster enabled and, for each
  server lacking one of this binary's features, which. Answered by the leader
  unless -stale is given, in which case the server at -address answers from
  its own view (useful when the cluster has no leader).

  -stale
    Answer from the contacted server's own view.`, true)
}

func (c *RaftListPeersCommand) Run(args []string) int {
	fs := c.flagSet("operator raft list-peers", true)
	stale := fs.Bool("stale", false, "")
	if _, err := c.parse(fs, args, 0, 0, "operator raft list-peers [options]"); err != nil {
		return c.fail(err)
	}
	ctx, stop := c.context()
	defer stop()
	q := url.Values{}
	if *stale {
		q.Set("stale", "true")
	}
	var out api.RaftConfigurationResponse
	if err := c.operatorJSON(ctx, http.MethodGet, "/v1/operator/raft/configuration", q, &out); err != nil {
		return c.fail(err)
	}
	if c.json {
		return c.printJSON(out)
	}
	rows := [][]string{{"ID", "Raft Address", "HTTP Address", "State", "Voter", "Version"}}
	for _, p := range out.Servers {
		st := "follower"
		if p.Leader {
			st = "leader"
		}
		rows = append(rows, []string{p.ID, p.RaftAddr, orDash(p.HTTPAddr), st, strconv.FormatBool(p.Voter), peerVersion(p)})
	}
	c.Ui.Output(table(rows))
	c.Ui.Output("\nEnabled features: " + orDash(strings.Join(out.EnabledFeatures, ", ")))
	for _, p := range out.Servers {
		var lacks []string
		for _, f := range cluster.Features() {
			if !slices.Contains(p.Features, f) {
				lacks = append(lacks, f)
			}
		}
		if len(lacks) > 0 {
			c.Ui.Output(fmt.Sprintf("%s lacks: %s", p.ID, strings.Join(lacks, ", ")))
		}
	}
	return 0
}

// peerVersion is the version a server advertised; a server older than the
// feature gates advertises none.
func peerVersion(p cluster.Peer) string {
	if p.Build == "" {
		return "before " + cluster.GateVersion
	}
	return p.Build
}

// RaftRemovePeerCommand is `volhost operator raft remove-peer ID`.
type RaftRemovePeerCommand struct{ *Meta }

func (c *RaftRemovePeerCommand) Synopsis() string { return "Remove a server from the raft peers" }
func (c *RaftRemovePeerCommand) Help() string {
	return helpText("operator raft remove-peer [options] <server-id>", `
  Remove a server (by raft ID, see list-peers) from the cluster, e.g. one
  that died for good, so it no longer counts towards the quorum.`, false)
}

func (c *RaftRemovePeerCommand) Run(args []string) int {
	fs := c.flagSet("operator raft remove-peer", false)
	rest, err := c.parse(fs, args, 1, 1, "operator raft remove-peer [options] <server-id>")
	if err != nil {
		return c.fail(err)
	}
	ctx, stop := c.context()
	defer stop()
	var out api.RemovePeerResponse
	if err := c.operatorJSON(ctx, http.MethodDelete, "/v1/operator/raft/peer", url.Values{"id": {rest[0]}}, &out); err != nil {
		return c.fail(err)
	}
	c.Ui.Output(fmt.Sprintf("Removed peer %q", out.Removed))
	return 0
}

// RaftTransferLeaderCommand is `volhost operator raft transfer-leader`.
type RaftTransferLeaderCommand struct{ *Meta }

func (c *RaftTransferLeaderCommand) Synopsis() string { return "Hand leadership to another server" }
func (c *RaftTransferLeaderCommand) Help() string {
	return helpText("operator raft transfer-leader [options]", `
  Gracefully hand leadership to another voter. The current leader stops its
  volume watcher (cancelling and waiting for its CSI calls) before it lets
  go, so the new leader's releases never overlap the old one's.

  -peer-id=<id>
    The server to hand leadership to (default: any voter raft picks).`, false)
}

func (c *RaftTransferLeaderCommand) Run(args []string) int {
	fs := c.flagSet("operator raft transfer-leader", false)
	id := fs.String("peer-id", "", "")
	if _, err := c.parse(fs, args, 0, 0, "operator raft transfer-leader [options]"); err != nil {
		return c.fail(err)
	}
	ctx, stop := c.context()
	defer stop()
	q := url.Values{}
	if *id != "" {
		q.Set("id", *id)
	}
	var out api.TransferLeaderResponse
	if err := c.operatorJSON(ctx, http.MethodPut, "/v1/operator/raft/transfer-leader", q, &out); err != nil {
		return c.fail(err)
	}
	if out.Leader != "" {
		c.Ui.Output(fmt.Sprintf("Leadership transferred to %q", out.Leader))
	} else {
		c.Ui.Output("Leadership transferred")
	}
	return 0
}

// SnapshotSaveCommand is `volhost operator snapshot save FILE`.
type SnapshotSaveCommand struct{ *Meta }

func (c *SnapshotSaveCommand) Synopsis() string { return "Save the whole cluster state to a file" }
func (c *SnapshotSaveCommand) Help() string {
	return helpText("operator snapshot save [options] <file>", `
  Save the whole replicated state (volumes, claims, allocations, nodes,
  plugins, leftovers, events) to a file, as the leader sees it. The file is
  framed: a header (format version, cluster ID, raft index and term,
  creation time), one line per row, and a SHA-256 trailer, so restore can
  tell a truncated or corrupted file. Volume secrets are sealed with the
  cluster keyring's active key (AES-256-GCM): the file never holds them in
  clear text, and only a cluster holding that key can restore them. The
  file is written aside and renamed into place, so a failure never leaves a
  truncated snapshot under the name. Needs operator:write.`, false)
}

func (c *SnapshotSaveCommand) Run(args []string) int {
	fs := c.flagSet("operator snapshot save", false)
	rest, err := c.parse(fs, args, 1, 1, "operator snapshot save [options] <file>")
	if err != nil {
		return c.fail(err)
	}
	ctx, stop := c.context()
	defer stop()
	resp, err := c.operatorDo(ctx, http.MethodGet, "/v1/operator/snapshot", nil, nil)
	if err != nil {
		return c.fail(err)
	}
	defer resp.Body.Close()
	path := rest[0]
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return c.fail(err)
	}
	n, err := io.Copy(tmp, resp.Body)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		return c.fail(fmt.Errorf("saving the snapshot to %s: %w", path, err))
	}
	c.Ui.Output(fmt.Sprintf("Saved snapshot to %s (%d bytes)", path, n))
	return 0
}

// SnapshotRestoreCommand is `volhost operator snapshot restore FILE`.
type SnapshotRestoreCommand struct{ *Meta }

func (c *SnapshotRestoreCommand) Synopsis() string {
	return "Replace the whole cluster state from a file"
}
func (c *SnapshotRestoreCommand) Help() string {
	return helpText("operator snapshot restore [options] <file>", `
  Replace the whole state of the cluster with a snapshot saved by
  "operator snapshot save". The leader checks the file completely first:
  checksum, trailer, cluster ID, and every row against the rules of the
  write that created it. A bad file is refused with one error and changes
  nothing. Then it restores through raft, so every server gets it. The
  cluster keeps its own ID, servers and keyring. The file is streamed, not
  read into memory. Needs operator:write.

  -force-foreign
    Accept a snapshot saved by another cluster. Only the cluster check is
    skipped; sealed secrets still need a key this cluster holds.`, false)
}

func (c *SnapshotRestoreCommand) Run(args []string) int {
	fs := c.flagSet("operator snapshot restore", false)
	var force bool
	fs.BoolVar(&force, "force-foreign", false, "")
	rest, err := c.parse(fs, args, 1, 1, "operator snapshot restore [options] <file>")
	if err != nil {
		return c.fail(err)
	}
	f, err := os.Open(rest[0])
	if err != nil {
		return c.fail(fmt.Errorf("reading the snapshot: %w", err))
	}
	defer f.Close()
	ctx, stop := c.context()
	defer stop()
	var q url.Values
	if force {
		q = url.Values{"force_foreign": {"true"}}
	}
	resp, err := c.operatorDo(ctx, http.MethodPut, "/v1/operator/snapshot", q, f)
	if err != nil {
		return c.fail(err)
	}
	_ = resp.Body.Close()
	c.Ui.Output(fmt.Sprintf("Restored snapshot from %s", rest[0]))
	return 0
}

// KeyringListCommand is `volhost operator keyring list`.
type KeyringListCommand struct{ *Meta }

func (c *KeyringListCommand) Synopsis() string { return "List the cluster keyring's keys" }
func (c *KeyringListCommand) Help() string {
	return helpText("operator keyring list [options]", `
  List the keys of the cluster keyring (ID, creation time, which one is
  active). Key material is never shown. Snapshots are sealed with the
  active key; older keys stay so older snapshots still restore.`, true)
}

func (c *KeyringListCommand) Run(args []string) int {
	fs := c.flagSet("operator keyring list", true)
	if _, err := c.parse(fs, args, 0, 0, "operator keyring list [options]"); err != nil {
		return c.fail(err)
	}
	ctx, stop := c.context()
	defer stop()
	var keys []cluster.KeyInfo
	if err := c.operatorJSON(ctx, http.MethodGet, "/v1/operator/keyring", nil, &keys); err != nil {
		return c.fail(err)
	}
	if c.json {
		return c.printJSON(keys)
	}
	rows := [][]string{{"ID", "Created", "Active"}}
	for _, k := range keys {
		rows = append(rows, []string{k.ID, k.CreatedAt.UTC().Format(time.RFC3339), strconv.FormatBool(k.Active)})
	}
	c.Ui.Output(table(rows))
	return 0
}

// KeyringRotateCommand is `volhost operator keyring rotate`.
type KeyringRotateCommand struct{ *Meta }

func (c *KeyringRotateCommand) Synopsis() string { return "Add a new active keyring key" }
func (c *KeyringRotateCommand) Help() string {
	return helpText("operator keyring rotate [options]", `
  Generate a new AES-256 key on the leader, replicate it through raft and
  make it the active one: snapshots saved from now on are sealed with it.
  Older keys are kept, so older snapshots still restore. Needs
  operator:write.`, false)
}

func (c *KeyringRotateCommand) Run(args []string) int {
	fs := c.flagSet("operator keyring rotate", false)
	if _, err := c.parse(fs, args, 0, 0, "operator keyring rotate [options]"); err != nil {
		return c.fail(err)
	}
	ctx, stop := c.context()
	defer stop()
	resp, err := c.operatorDo(ctx, http.MethodPut, "/v1/operator/keyring/rotate", nil, nil)
	if err != nil {
		return c.fail(err)
	}
	defer resp.Body.Close()
	var k cluster.KeyInfo
	if err := json.NewDecoder(resp.Body).Decode(&k); err != nil {
		return c.fail(fmt.Errorf("decode answer: %w", err))
	}
	c.Ui.Output(fmt.Sprintf("Keyring rotated: new active key %s", k.ID))
	return 0
}
