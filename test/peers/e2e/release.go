package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// PreviousReleaseFile names, relative to the product's root, the file
// that records the last release's commit (one line of 40 hex digits;
// lines starting with # are comments).
const PreviousReleaseFile = ".release/previous"

// productRoot is the volhost module's directory: two levels above this
// peers module, which does not require it.
func productRoot(ctx context.Context) (string, error) {
	peers, err := goOutput(ctx, "", "list", "-m", "-f", "{{.Dir}}", "github.com/volhost/volhost/test/peers")
	if err != nil {
		return "", fmt.Errorf("locating the peers module: %w", err)
	}
	return filepath.Clean(filepath.Join(peers, "..", "..")), nil
}

// ErrReleaseUnavailable: the previous release's commit cannot be built
// here (not in the clone).
var ErrReleaseUnavailable = errors.New("previous release unavailable")

// PreviousRelease returns the commit .release/previous names and the
// volhost binary built from it. The build runs once per commit, in a git
// worktree of that commit, into $HOME/.cache/volhost/<commit>/volhost (a
// build in progress is written aside and renamed, so a test stopped
// midway leaves no half binary); later runs take the cached one.
func PreviousRelease(ctx context.Context) (commit, bin string, err error) {
	root, err := productRoot(ctx)
	if err != nil {
		return "", "", err
	}
	commit, err = readReleaseCommit(filepath.Join(root, PreviousReleaseFile))
	if err != nil {
		return "", "", err
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", "", err
	}
	cache := filepath.Join(home, ".cache", "volhost", commit)
	bin = filepath.Join(cache, "volhost")
	if _, err := os.Stat(bin); err == nil {
		return commit, bin, nil
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return "", "", err
	}
	if _, err := runIn(ctx, root, "git", "cat-file", "-e", commit+"^{commit}"); err != nil {
		return commit, "", fmt.Errorf("%w: commit %s is not in this clone (a shallow clone? git fetch --unshallow)", ErrReleaseUnavailable, commit)
	}
	wt, err := os.MkdirTemp("", "vh-release-")
	if err != nil {
		return "", "", err
	}
	defer os.RemoveAll(wt)
	if out, err := runIn(ctx, root, "git", "worktree", "add", "--detach", wt, commit); err != nil {
		return "", "", fmt.Errorf("git worktree add %s: %w: %s", commit, err, out)
	}
	defer func() { _, _ = runIn(context.Background(), root, "git", "worktree", "remove", "--force", wt) }()
	tmp := bin + ".building"
	if _, err := goOutput(ctx, wt, "build", "-o", tmp, "./cmd/volhost"); err != nil {
		return "", "", fmt.Errorf("building the previous release %s: %w", commit, err)
	}
	if err := os.Rename(tmp, bin); err != nil {
		return "", "", err
	}
	return commit, bin, nil
}

// readReleaseCommit reads the commit of a release file.
func readReleaseCommit(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if len(line) != 40 || strings.Trim(line, "0123456789abcdef") != "" {
			return "", fmt.Errorf("%s: %q is not a commit (40 hex digits)", path, line)
		}
		return line, nil
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", fmt.Errorf("%s: no commit", path)
}
