package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// readmeBlock returns the lines of the first ```sh block under the README
// heading named heading: what a reader types, as written.
func readmeBlock(t *testing.T, readme, heading string) []string {
	t.Helper()
	f, err := os.Open(readme)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []string
	under, in := false, false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := sc.Text()
		switch {
		case strings.HasPrefix(l, "## "):
			if in {
				t.Fatalf("README %q: a heading inside its sh block", heading)
			}
			under = l == "## "+heading
		case under && !in && l == "```sh":
			in = true
		case in && l == "```":
			return lines
		case in:
			lines = append(lines, l)
		}
	}
	t.Fatalf("README.md has no sh block under %q", heading)
	return nil
}

// exitComment is what a README line says its exit code is, "(exit N)"
// in its comment; none: 0.
var exitComment = regexp.MustCompile(`#.*\(exit (\d+)\)`)

// TestReadmeWalkthrough runs the README's walk-through as written, line
// by line, against the real binary: the commands are read from README.md,
// so the two cannot drift. Each line must exit as its comment says (0
// unless "(exit N)"). The agent runs as `make run` starts it, over the
// example modules. The reader's `volhost=../../bin/volhost` points at
// the binary under test; a line after `alloc update` may wait for the
// watcher's release (a reader types slower than it releases).
func TestReadmeWalkthrough(t *testing.T) {
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	lines := readmeBlock(t, filepath.Join(root, "README.md"), "Walk-through")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// As `make run` starts it: a dev agent over the example modules.
	modDir := withModules(t, "default-policy", "gcepd-adapter", "grace-policy")
	agent, err := StartAgent(ctx, t.TempDir(), bins.Volhost, "", "-module-dir", modDir)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		agent.Stop(10 * time.Second)
		if t.Failed() {
			t.Logf("agent log tail:\n%s", agent.Tail(6000))
		}
	}()
	dir := root
	released := false
	ran := 0
	for _, line := range lines {
		cmd := strings.TrimSpace(line)
		switch {
		case cmd == "" || strings.HasPrefix(cmd, "#"):
			continue
		case strings.HasPrefix(cmd, "cd "):
			dir = filepath.Join(dir, strings.Fields(cmd)[1])
			continue
		case strings.HasPrefix(cmd, "volhost="):
			// The reader's binary is the repository's bin/volhost.
			if got, want := filepath.Join(dir, strings.TrimPrefix(strings.Fields(cmd)[0], "volhost=")), filepath.Join(root, "bin", "volhost"); got != want {
				t.Fatalf("README: %q points at %s, not the repository's bin/volhost", cmd, got)
			}
			continue
		}
		want := 0
		if m := exitComment.FindStringSubmatch(cmd); m != nil {
			fmt.Sscan(m[1], &want)
		}
		run := func() (string, int) {
			c := exec.CommandContext(ctx, "bash", "-c", "volhost="+bins.Volhost+"\n"+cmd)
			c.Dir = dir
			c.Env = append(os.Environ(), "VOLHOST_ADDR="+agent.Addr)
			out, err := c.CombinedOutput()
			var ee *exec.ExitError
			switch {
			case errors.As(err, &ee):
				return string(out), ee.ExitCode()
			case err != nil:
				t.Fatalf("README line %q: %v", cmd, err)
			}
			return string(out), 0
		}
		out, code := run()
		if code != want && released {
			// The release runs behind the reader: wait for it, bounded.
			err := Poll(ctx, 50*time.Millisecond, func() (bool, error) {
				out, code = run()
				return code == want, nil
			})
			if err != nil {
				t.Logf("waiting for %q: %v", cmd, err)
			}
		}
		if code != want {
			t.Fatalf("README line %q: exit %d, want %d:\n%s", cmd, code, want, out)
		}
		if strings.Contains(cmd, "alloc update") {
			released = true
		}
		ran++
	}
	if ran < 8 {
		t.Fatalf("ran %d README commands: the walk-through block was not read", ran)
	}
}
