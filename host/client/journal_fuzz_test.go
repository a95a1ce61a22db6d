package client

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/volhost/volhost/host/nodeconn"
)

// FuzzJournalEntry: a journal file of any bytes (torn by a crash, edited,
// another version's) under a step's name never panics the agent at start
// or at the step, and answers the step only if it is a done entry of that
// very key, method and path; anything else makes the agent call the driver
// again, which is always safe.
func FuzzJournalEntry(f *testing.F) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, e := range []journalEntry{
		{Key: keyA, Method: nodeconn.MethodUnpublish, Path: pathA, State: entryDone, Started: t0, Done: t0.Add(time.Second)},
		{Key: keyA, Method: nodeconn.MethodUnpublish, Path: pathA, State: entryStarted, Started: t0},
		{Key: keyA, Method: nodeconn.MethodUnstage, Path: pathA, State: entryDone, Started: t0, Done: t0},
		{Key: keyA, Method: nodeconn.MethodUnpublish, Path: "/elsewhere", State: entryDone, Started: t0, Done: t0},
		{Key: keyA, Method: nodeconn.MethodUnpublish, State: entryDone, Started: t0, Done: t0},
		{Key: "other", Method: nodeconn.MethodUnpublish, Path: pathA, State: entryDone, Started: t0, Done: t0},
	} {
		b, err := json.Marshal(e)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(b[:len(b)/2])
	}
	f.Fuzz(func(t *testing.T, file []byte) {
		root := t.TempDir()
		dir := filepath.Join(root, journalDir)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, fileName(keyA)), file, 0o600); err != nil {
			t.Fatal(err)
		}
		j, err := openJournal(root, clockwork.NewFakeClockAt(t0.Add(time.Hour)))
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		prev, err := j.begin(keyA, nodeconn.MethodUnpublish, pathA)
		if err != nil {
			t.Fatalf("begin: %v", err)
		}
		if prev != nil && (prev.Key != keyA || prev.Method != nodeconn.MethodUnpublish || prev.Path != pathA || (prev.State != entryDone && prev.State != entryStarted)) {
			t.Fatalf("answered from an entry that is not the step's: %+v", prev)
		}
		if prev == nil || prev.State != entryDone {
			if err := j.finish(keyA, nodeconn.MethodUnpublish, true); err != nil {
				t.Fatalf("finish: %v", err)
			}
		}
	})
}
