package state

import (
	"bufio"
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/volhost/volhost/host/structs"
)

// checkSameRow fails t when decodeLine takes a line encoding/json refuses,
// or decodes it other than json.Unmarshal and decodeRow do.
func checkSameRow(t *testing.T, line []byte) {
	t.Helper()
	table, got, _, err := decodeLine(line, newInterner())
	var pr persistRow
	werr := json.Unmarshal(line, &pr)
	var want any
	if werr == nil {
		want, werr = decodeRow(pr.Table, pr.Row)
	}
	if (err == nil) != (werr == nil) {
		t.Fatalf("%q: decodeLine err %v, encoding/json %v", line, err, werr)
	}
	if err == nil && (table != pr.Table || !reflect.DeepEqual(got, want)) {
		t.Fatalf("%q: decodeLine gave %s %+v, encoding/json %s %+v", line, table, got, pr.Table, want)
	}
}

// Every allocation and event row Persist writes is read without
// encoding/json, to what encoding/json reads; a field added to either
// without its case in its reader fails here.
func TestRestoreReadsRowsPlainly(t *testing.T) {
	f := richFixture(t)
	f.must(structs.AllocUpsertType, &structs.AllocUpsertRequest{Allocs: []*structs.Alloc{filledAlloc()}})
	var buf bytes.Buffer
	if err := f.s.Persist(&buf); err != nil {
		t.Fatal(err)
	}
	read := map[string]int{}
	sc := bufio.NewScanner(&buf)
	sc.Scan() // the header
	for sc.Scan() {
		line := sc.Bytes()
		checkSameRow(t, line)
		table, row, ok := splitPersistRow(line)
		if !ok {
			t.Fatalf("%s: not split", line)
		}
		switch table {
		case TableAllocs:
			if _, ok := readWhole(row, structs.ReadAllocJSON); !ok {
				t.Errorf("%s: not read plainly", row)
			}
		case TableEvents:
			if _, ok := readWhole(row, readEventRow); !ok {
				t.Errorf("%s: not read plainly", row)
			}
		default:
			continue
		}
		// And the restore takes that reader: decoding the line costs
		// fewer allocations than encoding/json's decoding of its row
		// alone (the readers above pass whatever decodeLine does).
		in := newInterner()
		viaLine := testing.AllocsPerRun(20, func() { _, _, _, _ = decodeLine(line, in) })
		viaJSON := testing.AllocsPerRun(20, func() { _, _ = decodeRow(table, row) })
		if viaLine >= viaJSON {
			t.Errorf("%s row: decodeLine allocates %.0f times, encoding/json %.0f: the restore does not read it plainly", table, viaLine, viaJSON)
		}
		read[table]++
	}
	if read[TableAllocs] < 2 || read[TableEvents] < 2 {
		t.Fatalf("rows read: %v; the fixture lost its allocations or events", read)
	}
	// An event row without its event is refused as before.
	if _, _, _, err := decodeLine([]byte(`{"t":"events","r":{"seq":1,"index":2}}`), newInterner()); err == nil {
		t.Fatal("an event row without an event was restored")
	}
}

// filledAlloc has the optional fields an upsert may set (a job).
func filledAlloc() *structs.Alloc {
	return &structs.Alloc{ID: "a-full", Namespace: "default", NodeID: "n1", JobID: "job", ClientStatus: structs.AllocRunning,
		ModifyTime: t0, CreateIndex: 1, ModifyIndex: 2}
}

// FuzzDecodeLine: whatever decodeLine takes, encoding/json takes and
// decodes to the same row, for the tables with a reader of their own.
func FuzzDecodeLine(f *testing.F) {
	for _, l := range []string{
		`{"t":"allocs","r":{"id":"a","namespace":"default","node_id":"n","client_status":"running","modify_time":"2026-12-06T03:00:00Z","create_index":1,"modify_index":2}}`,
		`{"t":"events","r":{"seq":1,"index":2,"ring":"v\u0000default\u0000v1","ring_seq":1,"event":{"index":2,"time":"2026-12-06T03:00:00Z","type":"claim-transition","message":"m","fields":{"a":"1"}}}}`,
		`{"t":"volumes","r":{"namespace":"default","id":"v","claims":{"a":{"alloc_id":"a","attempts":1,"create_time":"2026-12-06T03:00:00Z"}}}}`,
		`{"t":"events","r":{"seq":1,"event":null}}`,
	} {
		f.Add([]byte(l))
	}
	f.Fuzz(func(t *testing.T, line []byte) { checkSameRow(t, line) })
}

// A row padded with what bytes.TrimSpace trims but JSON does not allow
// as white space (\v, \f, Unicode's spaces) is refused, as encoding/json
// refuses it, by the line's reader and by a whole restore; JSON's own
// white space around a row is taken.
func TestRestoreTakesOnlyJSONWhiteSpace(t *testing.T) {
	row := `{"t":"allocs","r":{"id":"a","namespace":"default","node_id":"n","client_status":"running","modify_time":"2026-12-06T03:00:00Z","create_index":1,"modify_index":2}}`
	for _, pad := range []string{"\f", "\v", "\u00a0", "\u2028", "\u0085", "\u3000"} {
		for _, line := range []string{row + pad, pad + row} {
			checkSameRow(t, []byte(line))
			if _, _, _, err := decodeLine([]byte(line), newInterner()); err == nil {
				t.Errorf("%q: taken", line)
			}
		}
		stream := `{"volhost_state":1}` + "\n" + pad + "\n"
		if err := NewStore().Restore(strings.NewReader(stream)); err == nil {
			t.Errorf("a line of %q alone was skipped", pad)
		}
	}
	for _, line := range []string{row + " \t\r", "\r\n " + row} {
		if _, _, _, err := decodeLine([]byte(line), newInterner()); err != nil {
			t.Errorf("%q: %v", line, err)
		}
	}
}
