package api_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/volhost/volhost/host/api"
	"github.com/volhost/volhost/host/api/apitest"
)

// bigSaveOp answers a save with size bytes (a large state), at once.
type bigSaveOp struct {
	*fakeOp
	size int
}

func (b *bigSaveOp) SaveSnapshot(_ context.Context, w io.Writer) error {
	chunk := make([]byte, 1<<20)
	for left := b.size; left > 0; left -= len(chunk) {
		if _, err := w.Write(chunk[:min(len(chunk), left)]); err != nil {
			return err
		}
	}
	return nil
}

// Invariant attacked: an operator with operator:write cannot lock the
// other operators out of saves (the one save slot) for as long as they
// like.
//
// Found: the slot is held until the body has been sent, not only while
// the save is encoded and spooled. A caller that sends the GET, reads the
// status line and then reads nothing more (or a byte a minute) keeps the
// slot with no CPU and no encode in flight: every other save on that
// server, and through the read forwarding every save of the cluster sent
// to the leader, gets 429 + Retry-After: 10 until the write deadline of
// the save route ends it, which is SnapshotTimeout (30 min by default:
// the GET shares the upload's path, rawBodyRoutes), and the caller can
// then start again. The Retry-After: 10 it hands the others is a lie.
func TestAttackStalledReaderHoldsTheSaveSlot(t *testing.T) {
	spool := t.TempDir()
	op := &bigSaveOp{fakeOp: &fakeOp{id: "s1", leader: true}, size: 64 << 20}
	b := apitest.NewStoreBackend()
	s := api.NewServer(api.Config{SpoolDir: spool}, b.Store, b, nil)
	s.EnableCluster(op)
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)

	// The slow caller: its save is encoded and spooled whole (the 200 and
	// its Content-Length are sent only after), then it stops reading.
	conn, err := net.Dial("tcp", strings.TrimPrefix(ts.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	fmt.Fprintf(conn, "GET /v1/operator/snapshot HTTP/1.1\r\nHost: %s\r\n\r\n", strings.TrimPrefix(ts.URL, "http://"))
	_ = conn.SetReadDeadline(time.Now().Add(time.Minute))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the slow caller's save: %s", resp.Status)
	}
	// ... and reads nothing more.

	// Another operator's save, once the slow caller's save is only being
	// sent (nothing of it is encoded or spooled any more).
	var last *http.Response
	deadline := time.Now().Add(30 * time.Second) // the stall timeout (10 s), and the socket buffers filling first
	for {
		r2, err := http.Get(ts.URL + "/v1/operator/snapshot")
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, r2.Body)
		r2.Body.Close()
		last = r2
		if r2.StatusCode != http.StatusTooManyRequests || time.Now().After(deadline) {
			break
		}
		select { // Retry-After, shortened: the slot is not going to free
		case <-time.After(500 * time.Millisecond):
		case <-t.Context().Done():
			return
		}
	}
	if last.StatusCode == http.StatusTooManyRequests {
		t.Fatalf("a caller that reads its save's status line and then nothing keeps the one save slot: "+
			"another operator's save is refused (%s, Retry-After: %s) for as long as the stalled body is not read, "+
			"up to the save route's write deadline (SnapshotTimeout, %s by default), with no save being encoded or spooled",
			last.Status, last.Header.Get("Retry-After"), api.DefaultSnapshotTimeout)
	}
}

// Invariant attacked: an operator cannot make another server's save fail.
//
// Found: a save is a read, so a follower forwards it to the leader, and
// the one slot is the leader's: the save slot is one per cluster, not per
// server. A caller that stalls its save through follower A (the proxy
// reads from the leader only as fast as the caller reads) holds the
// leader's slot, and every save sent to follower B is refused with 429
// until the leader's write deadline for the save route (SnapshotTimeout,
// 30 min by default) ends the stalled one.
func TestAttackStalledSaveThroughOneServerRefusesSavesThroughAnother(t *testing.T) {
	spool := t.TempDir()
	lop := &bigSaveOp{fakeOp: &fakeOp{id: "s1", leader: true}, size: 64 << 20}
	b := apitest.NewStoreBackend()
	ls := api.NewServer(api.Config{SpoolDir: spool}, b.Store, b, nil)
	ls.EnableCluster(lop)
	leader := httptest.NewServer(ls.Handler())
	t.Cleanup(leader.Close)
	leaderHost := strings.TrimPrefix(leader.URL, "http://")
	a := serveMember(t, &fakeOp{id: "s2", leaderAddr: leaderHost})
	bm := serveMember(t, &fakeOp{id: "s3", leaderAddr: leaderHost})

	aHost := strings.TrimPrefix(a.ts.URL, "http://")
	conn, err := net.Dial("tcp", aHost)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	fmt.Fprintf(conn, "GET /v1/operator/snapshot HTTP/1.1\r\nHost: %s\r\n\r\n", aHost)
	_ = conn.SetReadDeadline(time.Now().Add(time.Minute))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the stalled caller's save through s2: %s", resp.Status)
	}
	// ... and reads nothing more.

	var last *http.Response
	deadline := time.Now().Add(30 * time.Second) // the stall timeout (10 s), and the socket buffers filling first
	for {
		r2, err := http.Get(bm.ts.URL + "/v1/operator/snapshot")
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, r2.Body)
		r2.Body.Close()
		last = r2
		if r2.StatusCode != http.StatusTooManyRequests || time.Now().After(deadline) {
			break
		}
		select {
		case <-time.After(500 * time.Millisecond):
		case <-t.Context().Done():
			return
		}
	}
	if last.StatusCode == http.StatusTooManyRequests {
		t.Fatalf("a save stalled by its caller through server s2 makes every save sent to server s3 fail (%s, Retry-After: %s): "+
			"both are forwarded to the leader, whose one slot the stalled send holds (up to SnapshotTimeout, %s)",
			last.Status, last.Header.Get("Retry-After"), api.DefaultSnapshotTimeout)
	}
}
