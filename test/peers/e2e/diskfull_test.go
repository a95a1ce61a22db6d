package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// mountTmpfs mounts a tmpfs of size at dir, or skips the test when this
// process may not mount (not root, no CAP_SYS_ADMIN, a container).
func mountTmpfs(t *testing.T, dir, size string) {
	t.Helper()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a %s tmpfs for the full disk (needs root and CAP_SYS_ADMIN): %v: %s", size, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", "-l", dir).CombinedOutput(); err != nil {
			t.Logf("umount %s: %v: %s", dir, err, out)
		}
	})
}

// fill writes a file of zeros into dir until the file system is full.
func fill(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling %s: %v", path, err)
			}
			break
		}
	}
	// The last partial blocks too.
	for _, n := range []int{4096, 512, 1} {
		for {
			if _, err := f.Write(buf[:n]); err != nil {
				break
			}
		}
	}
}

// TestDiskFull (RELIABILITY.md): a server whose data dir is a small tmpfs
// that fills up, then is mounted read-only. Every write acknowledged before, during and after the
// fault is there after a SIGKILL and a restart on the same data dir; a
// write the server could not persist is answered with an error, never
// acknowledged; the error says the disk is full; once space returns the
// server takes writes again without a restart; started on the data dir
// mounted read-only, it stops with an error saying so, and once the dir is
// writable again it starts with every acknowledged write.
func TestDiskFull(t *testing.T) {
	if testing.Short() {
		t.Skip("mounts a tmpfs and runs an agent process")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	mnt := filepath.Join(dir, "mnt")
	if err := os.MkdirAll(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	mountTmpfs(t, mnt, "16m")
	data := filepath.Join(mnt, "data")
	// Two distinct ports, held until both are picked.
	var ports addrReservation
	httpAddr, err := ports.next()
	if err != nil {
		t.Fatal(err)
	}
	raftAddr, err := ports.next()
	if err != nil {
		t.Fatal(err)
	}
	ports.release()
	cfg := filepath.Join(dir, "agent.hcl")
	if err := os.WriteFile(cfg, []byte("log_level = \"debug\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var agent *Proc
	api := NewAPI("http://" + httpAddr)
	start := func() {
		t.Helper()
		p, err := Start(dir, "agent", bins.Volhost, "agent", "-data-dir", data, "-bind", raftAddr, "-http-addr", httpAddr, "-config", cfg)
		if err != nil {
			t.Fatal(err)
		}
		agent = p
		if err := Poll(ctx, 20*time.Millisecond, func() (bool, error) {
			select {
			case <-p.Exited():
				return false, fmt.Errorf("agent exited:\n%s", p.Tail(4000))
			default:
			}
			l, err := api.Leader(ctx)
			return err == nil && l, nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	start()
	t.Cleanup(func() {
		agent.Stop(10 * time.Second)
		if t.Failed() {
			t.Logf("agent log tail:\n%s", agent.Tail(6000))
		}
	})

	acked := map[string]bool{}
	var refused []string
	var refusals []error
	write := func(id string) error {
		wctx, wcancel := context.WithTimeout(ctx, 15*time.Second)
		defer wcancel()
		err := api.RegisterVolumes(wctx, []VolumeSpec{{ID: id, Namespace: "default", ExternalID: "ext-" + id + strings.Repeat("x", 1000),
			PluginID: "p", AccessMode: "single-node-writer", AttachmentMode: "file-system"}})
		if err == nil {
			acked[id] = true
		} else if len(refused) < 1000 {
			refusals = append(refusals, err)
		}
		return err
	}
	// A plugin for the volumes to name (registration probes it).
	sock, err := os.MkdirTemp("", "vh")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sock) })
	drv, err := StartGCEPD(ctx, sock, dir, bins.Gcepd, GCEPDOptions{Disks: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { drv.Stop(5 * time.Second) })
	ag := &Agent{Proc: agent, Addr: "http://" + httpAddr, bin: bins.Volhost}
	plugin := filepath.Join(dir, "plugin.hcl")
	if err := os.WriteFile(plugin, []byte(fmt.Sprintf("plugin \"p\" {\n  controller_endpoint = %q\n}\n", Endpoint(drv.Controller))), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, code, err := ag.CLI(ctx, "plugin", "register", plugin); err != nil || code != 0 {
		t.Fatalf("plugin register: %v %d %s", err, code, out)
	}
	for i := 0; i < 5; i++ {
		if err := write(fmt.Sprintf("before-%d", i)); err != nil {
			t.Fatalf("write before the fault: %v", err)
		}
	}

	filler := filepath.Join(mnt, "filler")
	fill(t, filler)
	faultAt := time.Now()
	var fullErr error
	for i := 0; i < 500 && fullErr == nil; i++ {
		id := fmt.Sprintf("full-%d", i)
		if err := write(id); err != nil {
			fullErr = err
			refused = append(refused, id)
		}
	}
	if fullErr == nil {
		t.Fatal("500 writes acknowledged on a full disk")
	}
	t.Logf("first write refused on the full disk after %d acknowledged: %v", len(acked)-5, fullErr)
	for i := 0; i < 5; i++ {
		id := fmt.Sprintf("full-more-%d", i)
		if err := write(id); err != nil {
			refused = append(refused, id)
		}
	}
	// Every refusal is a 503 (no leader can write: a client retries)
	// that says why.
	for _, err := range refusals {
		var he *HTTPError
		if !errors.As(err, &he) || he.Status != 503 || !strings.Contains(err.Error(), "no space left on device") {
			t.Errorf("a refusal on the full disk is not a 503 naming the disk: %v", err)
		}
	}

	// Space returns: writes go through again, without a restart.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	n := 0
	if err := Poll(ctx, 100*time.Millisecond, func() (bool, error) {
		n++
		return write(fmt.Sprintf("after-%d", n)) == nil, nil
	}); err != nil {
		t.Fatalf("no write acknowledged once space returned: %v", err)
	}
	recovered := time.Since(faultAt)
	for i := 0; i < 5; i++ {
		if err := write(fmt.Sprintf("after-more-%d", i)); err != nil {
			t.Fatalf("write after recovery: %v", err)
		}
	}

	// Every acknowledged write survives a crash.
	agent.Kill()
	start()
	lost := 0
	for id := range acked {
		if _, _, err := api.Volume(ctx, id, 0, 0); err != nil {
			lost++
			t.Errorf("acknowledged write of %s lost after a restart: %v", id, err)
		}
	}
	present := 0
	for _, id := range refused {
		if _, _, err := api.Volume(ctx, id, 0, 0); err == nil {
			present++
		}
	}
	t.Logf("disk full: %d writes acknowledged, %d lost after SIGKILL and restart; %d refused (%d of them applied after all); "+
		"writes again %s after the disk filled (%d attempts after space returned)", len(acked), lost, len(refused), present,
		recovered.Round(time.Millisecond), n)

	// A read-only data dir: the server refuses to start, saying so
	// (a file system with files open for writing cannot be remounted
	// read-only under a running server, so this is checked at start).
	agent.Stop(10 * time.Second)
	if out, err := exec.Command("mount", "-o", "remount,ro", mnt).CombinedOutput(); err != nil {
		t.Fatalf("remount read-only: %v: %s", err, out)
	}
	p, err := Start(dir, "agent-ro", bins.Volhost, "agent", "-data-dir", data, "-bind", raftAddr, "-http-addr", httpAddr, "-config", cfg)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Exited():
	case <-ctx.Done():
		p.Kill()
		t.Fatal("the server ran on a read-only data dir")
	}
	if tail := p.Tail(4000); !strings.Contains(tail, "read-only file system") {
		t.Errorf("the server stopped on a read-only data dir without saying so:\n%s", tail)
	} else {
		for _, line := range strings.Split(tail, "\n") {
			if strings.Contains(line, "read-only file system") {
				t.Logf("read-only data dir: %s", strings.TrimSpace(line))
				break
			}
		}
	}
	if out, err := exec.Command("mount", "-o", "remount,rw", mnt).CombinedOutput(); err != nil {
		t.Fatalf("remount read-write: %v: %s", err, out)
	}
	start()
	for id := range acked {
		if _, _, err := api.Volume(ctx, id, 0, 0); err != nil {
			t.Errorf("acknowledged write of %s lost after the read-only start: %v", id, err)
		}
	}
}
