package state

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/volhost/volhost/host/structs"
)

// padStream puts n valid rows before the first row of each of tables in
// stream, copies of that table's first row in good with the key field
// ("id") key gives each copy's number (sorting before the table's own
// keys), so that the rows after them come batches later
// (restoreBatchLines) and are checked ahead of their inserts.
func padStream(t testing.TB, good, stream []byte, n int, key map[string]func(int) string) []byte {
	t.Helper()
	type row struct {
		T string         `json:"t"`
		R map[string]any `json:"r"`
	}
	first := map[string]map[string]any{}
	for line := range bytes.Lines(good) {
		var pr row
		if json.Unmarshal(line, &pr) == nil && key[pr.T] != nil && first[pr.T] == nil {
			first[pr.T] = pr.R
		}
	}
	var out bytes.Buffer
	padded := map[string]bool{}
	for line := range bytes.Lines(stream) {
		var pr row
		if json.Unmarshal(line, &pr) == nil && key[pr.T] != nil && !padded[pr.T] {
			padded[pr.T] = true
			for i := range n {
				r := maps.Clone(first[pr.T])
				r["id"] = key[pr.T](i)
				delete(r, "claims")
				delete(r, "stuck")
				if _, ok := r["external_id"]; ok {
					r["external_id"] = "pad-" + key[pr.T](i)
				}
				b, err := json.Marshal(row{T: pr.T, R: r})
				if err != nil {
					t.Fatal(err)
				}
				out.Write(append(b, '\n'))
			}
		}
		out.Write(line)
	}
	if len(padded) != len(key) {
		t.Fatalf("padded %v of %d tables", padded, len(key))
	}
	return out.Bytes()
}

// A row checked ahead of its insert (restore_ahead.go) is refused at the
// same row with the same error as one checked in order: a restore against
// an operator snapshot's import (Builder, which checks every row in
// order), for every invalid row of invalidRows, each behind three
// batches of valid volumes and allocations. Under -race it also runs the
// ahead checks' reads beside the inserts.
func TestRestoreChecksAheadAsInOrder(t *testing.T) {
	f := richFixture(t)
	var good bytes.Buffer
	if err := f.s.Persist(&good); err != nil {
		t.Fatal(err)
	}
	pad := map[string]func(int) string{
		TableAllocs:  func(i int) string { return fmt.Sprintf("a0-%04d", i) },
		TableVolumes: func(i int) string { return fmt.Sprintf("vol-a%04d", i) },
	}
	n := 3 * restoreBatchLines
	padded := padStream(t, good.Bytes(), good.Bytes(), n, pad)
	s := NewStore()
	if err := s.Restore(bytes.NewReader(padded)); err != nil {
		t.Fatalf("the padded stream is refused: %v", err)
	}
	vols, err := s.Snapshot().Volumes(nil)
	if want := n + 4; err != nil || len(vols) != want {
		t.Fatalf("restored %d volumes (%v), want %d", len(vols), err, want)
	}
	importErr := regexp.MustCompile(`^line (\d+): (.*)$`)
	for _, tc := range invalidRows {
		t.Run(tc.name, func(t *testing.T) {
			stream := padStream(t, good.Bytes(), editStream(t, good.Bytes(), tc.table, tc.key, tc.edit), n, pad)
			_, ierr := importRows(stream)
			m := importErr.FindStringSubmatch(fmt.Sprint(ierr))
			if m == nil || !strings.Contains(m[2], tc.want) {
				t.Fatalf("import: %v, want an error containing %q", ierr, tc.want)
			}
			err := NewStore().Restore(bytes.NewReader(stream))
			if err == nil || !strings.Contains(err.Error(), "row "+m[1]) || !strings.HasSuffix(err.Error(), m[2]) {
				t.Fatalf("restore: %v\nwant the error of the in-order checks at row %s: %s", err, m[1], m[2])
			}
		})
	}
}

// The checks run ahead only where their answer cannot depend on the rows
// inserted meanwhile: inside a volumes or allocations table, on the view
// its rows are checked on in order, and for a batch of that table's rows
// alone; rowChecked takes an answer given on another view as none.
func TestCheckAheadWhere(t *testing.T) {
	f := richFixture(t)
	var good bytes.Buffer
	if err := f.s.Persist(&good); err != nil {
		t.Fatal(err)
	}
	db := newDB()
	txn := db.Txn(true)
	defer txn.Abort()
	check := newRowChecker(db, txn)
	batch := func(rows ...decodedRow) *rowBatch { return &rowBatch{rows: rows} }
	var vol, alloc decodedRow
	for line := range bytes.Lines(good.Bytes()) {
		table, obj, _, err := decodeLine(bytes.TrimSpace(line), newInterner())
		if err != nil {
			continue // the header
		}
		row := decodedRow{table: table, obj: obj}
		switch {
		case table == TableVolumes && vol.obj == nil:
			if c := check.checkAhead(batch(row)); c != nil {
				t.Fatal("a volume was checked ahead before the first volume went in: no view of the tables before it")
			}
			vol = row
		case table == TableAllocs && alloc.obj == nil:
			alloc = row
		}
		if err := check.row(table, obj); err != nil {
			t.Fatal(err)
		}
		if err := txn.Insert(table, obj); err != nil {
			t.Fatal(err)
		}
		if table == TableVolumes {
			break
		}
	}
	b := batch(vol, vol)
	c := check.checkAhead(b)
	if c == nil {
		t.Fatal("a batch of volumes inside the volumes table was not checked ahead")
	}
	<-c
	for _, r := range b.rows {
		if r.ahead.on != check.view.txn || r.ahead.err != nil {
			t.Fatalf("checked ahead on %p with %v, want the table's view %p and no error", r.ahead.on, r.ahead.err, check.view.txn)
		}
	}
	// Up to a row of another table, or one not decoded.
	undecoded := decodedRow{table: TableVolumes, err: fmt.Errorf("bad")}
	for _, b := range []*rowBatch{batch(vol, alloc, vol), batch(vol, undecoded, vol)} {
		c := check.checkAhead(b)
		if c == nil {
			t.Fatal("a batch that starts with volumes was not checked ahead")
		}
		<-c
		if got := []bool{b.rows[0].ahead.on != nil, b.rows[1].ahead.on != nil, b.rows[2].ahead.on != nil}; !slices.Equal(got, []bool{true, false, false}) {
			t.Fatalf("rows checked ahead: %v, want the first only", got)
		}
	}
	for name, b := range map[string]*rowBatch{
		"a batch of a table before":                  batch(alloc),
		"a batch that starts with a row not decoded": batch(undecoded, vol),
		"no rows": batch(),
	} {
		if check.checkAhead(b) != nil {
			t.Errorf("%s was checked ahead", name)
		}
	}
	// An answer given on another view is not taken: the row is checked
	// again (a volume of an unknown plugin is refused although the answer
	// says it is fine).
	bad := *vol.obj.(*structs.Volume)
	bad.PluginID = "gone"
	if err := check.rowChecked(TableVolumes, &bad, aheadCheck{on: db.Txn(false)}); err == nil || !strings.Contains(err.Error(), `"gone"`) {
		t.Fatalf("an answer from another view was taken: %v", err)
	}
}
