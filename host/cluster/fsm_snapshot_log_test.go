package cluster

import (
	"bufio"
	"bytes"
	"encoding/json"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/volhost/volhost/host/state"
)

// Each raft snapshot's "snapshot written" line splits its time into the
// encoding and the sink's close, as JSON nanoseconds (the scale report of
// test/peers reads them), and counts the bytes raft's file store kept.
func TestSnapshotWrittenLogLine(t *testing.T) {
	var logs bytes.Buffer
	logger := hclog.New(&hclog.LoggerOptions{Output: &logs, JSONFormat: true, Level: hclog.Info})
	f := &fsm{store: state.NewStore(), meta: newMeta(), logger: logger}
	snaps, err := raft.NewFileSnapshotStore(t.TempDir(), 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	sink, err := snaps.Create(raft.SnapshotVersionMax, 7, 1, raft.Configuration{}, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	metas, err := snaps.List()
	if err != nil || len(metas) != 1 {
		t.Fatalf("snapshots %v, %v; want one", metas, err)
	}
	var line *struct {
		ID     string `json:"id"`
		Bytes  int64  `json:"bytes"`
		Encode *int64 `json:"encode"`
		Close  *int64 `json:"close"`
	}
	sc := bufio.NewScanner(&logs)
	for sc.Scan() {
		var l struct {
			Message string `json:"@message"`
		}
		if json.Unmarshal(sc.Bytes(), &l) == nil && l.Message == "snapshot written" {
			if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
				t.Fatal(err)
			}
		}
	}
	switch {
	case line == nil:
		t.Fatalf("no \"snapshot written\" line in %s", logs.String())
	case line.ID != metas[0].ID || line.Bytes != metas[0].Size:
		t.Fatalf("logged snapshot %q of %d bytes; raft kept %q of %d", line.ID, line.Bytes, metas[0].ID, metas[0].Size)
	case line.Encode == nil || line.Close == nil || *line.Encode < 0 || *line.Close < 0:
		t.Fatalf("encode %v, close %v: want nanoseconds", line.Encode, line.Close)
	}
}
