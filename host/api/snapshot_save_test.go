package api_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strconv"
	"testing"

	"github.com/volhost/volhost/host/api"
	"github.com/volhost/volhost/host/api/apitest"
)

// sizedSaveOp saves a snapshot of size bytes, written in small chunks as
// the real save streams its rows, failing after failAt bytes when set.
type sizedSaveOp struct {
	*fakeOp
	size, failAt int
}

func (f *sizedSaveOp) SaveSnapshot(_ context.Context, w io.Writer) error {
	chunk := make([]byte, 32<<10)
	for i := range chunk {
		chunk[i] = byte('a' + i%26)
	}
	for n := 0; n < f.size; n += len(chunk) {
		if f.failAt > 0 && n >= f.failAt {
			return errors.New("disk gone")
		}
		if _, err := w.Write(chunk[:min(len(chunk), f.size-n)]); err != nil {
			return err
		}
	}
	return nil
}

func serveSave(t *testing.T, op *sizedSaveOp, spool string) http.Handler {
	t.Helper()
	b := apitest.NewStoreBackend()
	s := api.NewServer(api.Config{SpoolDir: spool}, b.Store, b, nil)
	s.EnableCluster(op)
	return s.Handler()
}

func saveRequest() *http.Request {
	req := httptest.NewRequest("GET", "/v1/operator/snapshot", nil)
	req.Host = "127.0.0.1:4646"
	return req
}

// countingWriter is a ResponseWriter that keeps nothing of the body.
type countingWriter struct {
	hdr    http.Header
	status int
	n      int64
}

func (c *countingWriter) Header() http.Header { return c.hdr }
func (c *countingWriter) WriteHeader(s int)   { c.status = s }
func (c *countingWriter) Write(p []byte) (int, error) {
	if c.status == 0 {
		c.status = http.StatusOK
	}
	c.n += int64(len(p))
	return len(p), nil
}

// A save is sent whole with its length, or refused with an error status:
// never a truncated 200.
func TestSnapshotSaveSendsAllOrAnError(t *testing.T) {
	const size = 5<<20 + 123
	spool := t.TempDir()
	for _, tc := range []struct {
		name   string
		failAt int
		status int
	}{
		{"whole", 0, http.StatusOK},
		{"fails half way", size / 2, http.StatusInternalServerError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := serveSave(t, &sizedSaveOp{fakeOp: &fakeOp{id: "s1", leader: true}, size: size, failAt: tc.failAt}, spool)
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, saveRequest())
			if rec.Code != tc.status {
				t.Fatalf("status %d, want %d: %.200s", rec.Code, tc.status, rec.Body.String())
			}
			if tc.status != http.StatusOK {
				if rec.Body.Len() > 4096 {
					t.Fatalf("a failed save sent %d bytes of snapshot", rec.Body.Len())
				}
				return
			}
			if rec.Body.Len() != size || rec.Header().Get("Content-Length") != strconv.Itoa(size) {
				t.Fatalf("sent %d bytes, Content-Length %q; want %d", rec.Body.Len(), rec.Header().Get("Content-Length"), size)
			}
		})
	}
	if left, _ := os.ReadDir(spool); len(left) != 0 {
		t.Fatalf("the spool dir keeps %d files after the saves", len(left))
	}
}

// The save goes through a file, not the heap: at 1,000,000 volumes it is
// 369 MiB, and a buffer of it pushed the leader over its memory limit
// until it lost its quorum.
//
// TotalAlloc counts the whole process, so another goroutine allocating at
// the same moment could push one save over the bound; the least of three
// saves is taken. A save held in memory allocates at least its size every
// time, so no retry can make it pass.
func TestSnapshotSaveIsNotHeldInMemory(t *testing.T) {
	const size = 64 << 20
	h := serveSave(t, &sizedSaveOp{fakeOp: &fakeOp{id: "s1", leader: true}, size: size}, t.TempDir())
	least := uint64(1<<64 - 1)
	for range 3 {
		w := &countingWriter{hdr: http.Header{}}
		req := saveRequest()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		h.ServeHTTP(w, req)
		runtime.ReadMemStats(&after)
		if w.status != http.StatusOK || w.n != size {
			t.Fatalf("status %d, %d bytes; want 200 and %d", w.status, w.n, size)
		}
		least = min(least, after.TotalAlloc-before.TotalAlloc)
		if least <= size/8 {
			return
		}
	}
	t.Fatalf("a %d MiB save allocated at least %d MiB in each of three saves: it is held in memory", size>>20, least>>20)
}
