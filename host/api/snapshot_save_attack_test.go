package api_test

// Red-team attacks on the spooled operator snapshot save (operator.go:
// snapshotSave, openSpool). Each test states the invariant it attacks.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/volhost/volhost/host/api"
	"github.com/volhost/volhost/host/api/apitest"
	"github.com/volhost/volhost/host/cluster"
	"github.com/volhost/volhost/host/state"
	"github.com/volhost/volhost/host/structs"
)

// openSpools lists this process's open files under dir (the spool files
// are unlinked at once, so the directory shows nothing: /proc/self/fd
// does) with their sizes.
func openSpools(t *testing.T, dir string) (n int, bytes int64) {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	for _, e := range ents {
		p := filepath.Join("/proc/self/fd", e.Name())
		target, err := os.Readlink(p)
		if err != nil || !strings.HasPrefix(target, dir+string(filepath.Separator)) {
			continue
		}
		n++
		if fi, err := os.Stat(p); err == nil {
			bytes += fi.Size()
		}
	}
	return n, bytes
}

// heldSaveOp writes chunk bytes of a save, says so on entered, then holds
// the save open until release is closed (or the request goes away).
type heldSaveOp struct {
	*fakeOp
	chunk   int
	entered chan struct{}
	release chan struct{}
}

func (h *heldSaveOp) SaveSnapshot(ctx context.Context, w io.Writer) error {
	if _, err := w.Write(make([]byte, h.chunk)); err != nil {
		return err
	}
	h.entered <- struct{}{}
	select {
	case <-h.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Invariant attacked: concurrent saves are bounded; an operator:write
// holder (or a script looping on `volhost operator snapshot save`) must
// not be able to make the leader spool one whole snapshot per concurrent
// request into its data dir (the disk raft's log and snapshots live on)
// and encode one per request on its CPUs.
//
// Found: there is no bound. Every concurrent GET /v1/operator/snapshot
// opens its own spool file in the data dir and runs its own encode; with
// N requests in flight the data dir holds N copies of the state (at
// 1,000,000 volumes 369 MiB each), only the per-client connection cap
// (200 by default) limits N, and a save of a client that went away runs
// on to the end (TestAttackSnapshotSaveStopsWhenTheCallerGoesAway).
func TestAttackConcurrentSnapshotSavesAreBounded(t *testing.T) {
	const (
		n     = 8
		chunk = 1 << 20
		bound = 2 // any bound will do: there is none
	)
	spool := t.TempDir()
	op := &heldSaveOp{fakeOp: &fakeOp{id: "s1", leader: true}, chunk: chunk,
		entered: make(chan struct{}, n), release: make(chan struct{})}
	b := apitest.NewStoreBackend()
	s := api.NewServer(api.Config{SpoolDir: spool}, b.Store, b, nil)
	s.EnableCluster(op)
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	var once sync.Once
	releaseAll := func() { once.Do(func() { close(op.release) }) }
	t.Cleanup(releaseAll)

	type answer struct {
		status int
		n      int64
		err    error
	}
	answers := make(chan answer, n)
	for range n {
		go func() {
			resp, err := http.Get(ts.URL + "/v1/operator/snapshot")
			if err != nil {
				answers <- answer{err: err}
				return
			}
			defer resp.Body.Close()
			got, err := io.Copy(io.Discard, resp.Body)
			answers <- answer{status: resp.StatusCode, n: got, err: err}
		}()
	}

	// Every request either reaches the save (and holds its spool) or is
	// refused at once.
	var spooling, refused int
	var early []answer
	deadline := time.After(30 * time.Second)
	for spooling+refused < n {
		select {
		case <-op.entered:
			spooling++
		case a := <-answers:
			refused++
			early = append(early, a)
		case <-deadline:
			t.Fatalf("after 30 s: %d saves spooling, %d answered", spooling, refused)
		}
	}
	files, size := openSpools(t, spool)
	releaseAll()
	for range n - refused {
		a := <-answers
		if a.err != nil || a.status != http.StatusOK || a.n != chunk {
			t.Errorf("a held save answered %d with %d bytes (%v)", a.status, a.n, a.err)
		}
	}
	for _, a := range early {
		if a.status != http.StatusTooManyRequests && a.status != http.StatusServiceUnavailable {
			t.Errorf("a save refused for the bound answered %d (%v), want 429 or 503", a.status, a.err)
		}
	}
	if spooling > bound {
		t.Fatalf("%d concurrent snapshot saves were all spooled at once: %d spool files open in the data dir holding %d MiB "+
			"(%d MiB per request, no bound; none refused)", spooling, files, size>>20, chunk>>20)
	}
}

// devCluster is a single-server dev cluster holding volumes volumes (no
// secrets): an operator save of it is a few MiB.
func devCluster(t *testing.T, volumes int) *cluster.Cluster {
	t.Helper()
	c, err := cluster.New(cluster.Config{Dev: true, Logger: hclog.NewNullLogger()}, state.NewStore())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Shutdown() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := c.WaitForLeader(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	var p structs.Plugin
	if err := json.Unmarshal([]byte(`{"id":"nfs","provider":"nfs.csi.example","version":"2.1.0"}`), &p); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Apply(ctx, structs.PluginUpsertType, &structs.PluginUpsertRequest{Plugin: &p}); err != nil {
		t.Fatal(err)
	}
	const batch = 500
	for i := 0; i < volumes; i += batch {
		var vols []*structs.Volume
		for j := i; j < min(i+batch, volumes); j++ {
			var v structs.Volume
			raw := fmt.Sprintf(`{"namespace":"default","id":"vol-%06d","external_id":"nfs://share/%06d","plugin_id":"nfs",`+
				`"access_mode":"multi-node-reader-only","attachment_mode":"file-system","parameters":{"tier":"standard-%d"}}`, j, j, j)
			if err := json.Unmarshal([]byte(raw), &v); err != nil {
				t.Fatal(err)
			}
			vols = append(vols, &v)
		}
		if _, _, err := c.Apply(ctx, structs.VolumeRegisterType, &structs.VolumeRegisterRequest{Volumes: vols}); err != nil {
			t.Fatalf("register volumes %d-: %v", i, err)
		}
	}
	return c
}

// leaveProbe is the real cluster's save with its writer watched: the
// first write waits until the request's context is done (the caller went
// away), then everything written is counted.
type leaveProbe struct {
	*cluster.Cluster
	started chan struct{}
	done    chan error
	after   atomic.Int64 // bytes the save wrote once its request was gone
	total   atomic.Int64
}

type leaveWriter struct {
	ctx   context.Context
	w     io.Writer
	p     *leaveProbe
	first bool
}

func (l *leaveWriter) Write(b []byte) (int, error) {
	if l.first {
		l.first = false
		close(l.p.started)
		select {
		case <-l.ctx.Done():
		case <-time.After(time.Minute):
			return 0, errors.New("test: the request's context was never cancelled")
		}
	}
	n, err := l.w.Write(b)
	l.p.total.Add(int64(n))
	if l.ctx.Err() != nil {
		l.p.after.Add(int64(n))
	}
	return n, err
}

func (p *leaveProbe) SaveSnapshot(ctx context.Context, w io.Writer) error {
	err := p.Cluster.SaveSnapshot(ctx, &leaveWriter{ctx: ctx, w: w, p: p, first: true})
	p.done <- err
	return err
}

// Invariant attacked: a save whose caller disconnected (or whose context
// was cancelled) stops, and stops using the data dir and the CPU.
//
// Found: cluster.SaveSnapshot checks its context only in the barrier;
// snapshot.Write never looks at it. A caller that sends the GET and
// hangs up at once leaves the leader encoding the whole state and
// spooling every byte of it to the data dir, then throwing it away. With
// no bound on concurrent saves (TestAttackConcurrentSnapshotSavesAreBounded) a
// client can start saves in a loop without keeping a single connection
// open: the connection caps do not limit it either.
func TestAttackSnapshotSaveStopsWhenTheCallerGoesAway(t *testing.T) {
	c := devCluster(t, 20000)
	spool := t.TempDir()
	p := &leaveProbe{Cluster: c, started: make(chan struct{}), done: make(chan error, 1)}
	b := apitest.NewStoreBackend()
	s := api.NewServer(api.Config{SpoolDir: spool}, b.Store, b, nil)
	s.EnableCluster(p)
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, ts.URL+"/v1/operator/snapshot", nil)
	if err != nil {
		t.Fatal(err)
	}
	clientErr := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		clientErr <- err
	}()
	select {
	case <-p.started:
	case <-time.After(time.Minute):
		t.Fatal("the save never started writing")
	}
	cancel() // the caller goes away: its connection closes
	<-clientErr
	var saveErr error
	select {
	case saveErr = <-p.done:
	case <-time.After(2 * time.Minute):
		t.Fatal("the save did not end within 2 minutes of its caller leaving")
	}
	after, total := p.after.Load(), p.total.Load()
	t.Logf("save ended with %v: %d bytes written, %d of them after the caller left", saveErr, total, after)
	if after > 256<<10 {
		t.Fatalf("the save went on after its caller had gone: it encoded and spooled %d KiB (of %d KiB) into the data dir "+
			"with nobody to send them to, and ended with err=%v (want the context's error, and at most a buffer's worth written)",
			after>>10, total>>10, saveErr)
	}
}

// Invariant attacked: a save that fails says what is wrong and what to
// do. The spool's open failure does ("check its free space and
// permissions"); a spool that fills up part way through the save (data
// dir full, a quota, a file size limit) does not.
//
// The child process runs the save under RLIMIT_FSIZE = 1 MiB, so the
// kernel refuses the spool's writes past 1 MiB (EFBIG) as a full disk
// would (ENOSPC): a real write error from a real file.
func TestAttackSnapshotSaveSpoolFullErrorSaysWhatToDo(t *testing.T) {
	const child = "VOLHOST_ATTACK_SPOOL_FULL_CHILD"
	if dir := os.Getenv(child); dir != "" {
		spoolFullChild(t, dir)
		return
	}
	spool := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestAttackSnapshotSaveSpoolFullErrorSaysWhatToDo$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), child+"="+spool)
	out, err := cmd.CombinedOutput()
	var status int
	var body string
	for _, line := range strings.Split(string(out), "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "SPOOLFULL "); ok {
			if _, serr := fmt.Sscanf(rest, "%d", &status); serr == nil {
				body = strings.TrimSpace(rest[strings.Index(rest, " ")+1:])
			}
		}
	}
	if status == 0 {
		t.Fatalf("child gave no result (%v):\n%s", err, out)
	}
	if left, _ := os.ReadDir(spool); len(left) != 0 {
		t.Errorf("the spool dir keeps %d files after a failed save", len(left))
	}
	if status < 500 {
		t.Fatalf("a save whose spool filled up answered %d: %s", status, body)
	}
	var er api.ErrorResponse
	if err := json.Unmarshal([]byte(body), &er); err != nil {
		t.Fatalf("error body %q: %v", body, err)
	}
	t.Logf("answer %d: %s", status, er.Error)
	if !strings.Contains(er.Error, "free space") {
		t.Fatalf("a save whose spool filled up answers %d %q: it names a deleted temporary file and the errno, "+
			"not that the save is spooled in the data dir and that its free space must be checked, as the open failure does", status, er.Error)
	}
}

func spoolFullChild(t *testing.T, spool string) {
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &syscall.Rlimit{Cur: 1 << 20, Max: 1 << 20}); err != nil {
		t.Fatalf("setrlimit: %v", err)
	}
	h := serveSave(t, &sizedSaveOp{fakeOp: &fakeOp{id: "s1", leader: true}, size: 4 << 20}, spool)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, saveRequest())
	out := strings.ReplaceAll(rec.Body.String(), "\n", " ")
	if len(out) > 2000 {
		out = fmt.Sprintf("(%d bytes of snapshot)", rec.Body.Len())
	}
	fmt.Printf("SPOOLFULL %d %s\n", rec.Code, out)
}

// panicSaveOp writes part of a save, then panics.
type panicSaveOp struct{ *fakeOp }

func (panicSaveOp) SaveSnapshot(_ context.Context, w io.Writer) error {
	_, _ = w.Write(make([]byte, 1<<20))
	panic("test: the save's writer panics")
}

// countingSaveOp counts the saves that reached the cluster.
type countingSaveOp struct {
	*fakeOp
	calls atomic.Int64
}

func (c *countingSaveOp) SaveSnapshot(_ context.Context, w io.Writer) error {
	c.calls.Add(1)
	_, err := w.Write([]byte("snapshot"))
	return err
}

// Held: a spool dir that cannot take the spool (missing, a file) is an
// error naming the path inside the configured dir and what to check,
// before any save work; a writer that panics answers no 200 and leaves
// no spool behind.
func TestAttackHeldSnapshotSaveSpoolFailures(t *testing.T) {
	base := t.TempDir()
	file := filepath.Join(base, "not-a-dir")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{filepath.Join(base, "missing"), file} {
		op := &countingSaveOp{fakeOp: &fakeOp{id: "s1", leader: true}}
		b := apitest.NewStoreBackend()
		s := api.NewServer(api.Config{SpoolDir: dir}, b.Store, b, nil)
		s.EnableCluster(op)
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, saveRequest())
		var er api.ErrorResponse
		_ = json.Unmarshal(rec.Body.Bytes(), &er)
		if rec.Code != http.StatusInternalServerError || op.calls.Load() != 0 ||
			!strings.Contains(er.Error, dir) || !strings.Contains(er.Error, "free space and permissions") {
			t.Errorf("spool dir %s: %d, %d saves run, %q", dir, rec.Code, op.calls.Load(), er.Error)
		}
	}

	spool := t.TempDir()
	b := apitest.NewStoreBackend()
	s := api.NewServer(api.Config{SpoolDir: spool}, b.Store, b, nil)
	s.EnableCluster(panicSaveOp{&fakeOp{id: "s1", leader: true}})
	ts := httptest.NewUnstartedServer(s.Handler())
	ts.Config.ErrorLog = log.New(io.Discard, "", 0) // the recovered panic
	ts.Start()
	t.Cleanup(ts.Close)
	resp, err := http.Get(ts.URL + "/v1/operator/snapshot")
	if err == nil {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Logf("a save whose writer panicked: %d %s", resp.StatusCode, body)
		if resp.StatusCode < 500 || len(body) > 4096 {
			t.Errorf("a save whose writer panicked answered %d with %d bytes", resp.StatusCode, len(body))
		}
	}
	waitNoSpool(t, spool)
}

// waitNoSpool waits until no spool file under dir is open (the
// handler's deferred close runs as its panic unwinds).
func waitNoSpool(t *testing.T, dir string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		if n, _ := openSpools(t, dir); n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a spool file is still open 30 s after the save ended")
		}
		<-tick.C
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Fatalf("the spool dir keeps %d files", len(left))
	}
}

// Invariant attacked (no work without a save to send): the save is only
// taken for a caller who gets it.
//
// Found (low): "GET /v1/operator/snapshot" also matches HEAD (Go's mux),
// so a HEAD runs the whole save (the leader encodes its state and spools
// it to the data dir), answers 200 with the length, sends no byte, and is
// audited as a snapshot-save.
func TestAttackHeadSnapshotRunsNoSave(t *testing.T) {
	op := &countingSaveOp{fakeOp: &fakeOp{id: "s1", leader: true}}
	b := apitest.NewStoreBackend()
	s := api.NewServer(api.Config{SpoolDir: t.TempDir()}, b.Store, b, nil)
	s.EnableCluster(op)
	req := httptest.NewRequest(http.MethodHead, "/v1/operator/snapshot", nil)
	req.Host = "127.0.0.1:4646"
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, req)
	if op.calls.Load() != 0 {
		t.Fatalf("HEAD /v1/operator/snapshot answered %d (Content-Length %q) after running %d whole saves",
			rec.Code, rec.Header().Get("Content-Length"), op.calls.Load())
	}
}
