package state

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/volhost/volhost/host/structs"
)

// rowLines renders a store as import input: one "table json" line a row,
// in Rows order.
func rowLines(t testing.TB, s *Store) []byte {
	var out bytes.Buffer
	err := s.Snapshot().Rows(func(table string, row any) error {
		b, err := json.Marshal(row)
		if err != nil {
			return err
		}
		out.WriteString(table + " ")
		out.Write(b)
		out.WriteByte('\n')
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// importLines feeds rowLines-shaped input through DecodeRow and a
// Builder; a refused row is the error.
func importLines(in []byte) (*Store, error) {
	b := NewBuilder()
	for line := range bytes.Lines(in) {
		table, raw, _ := bytes.Cut(bytes.TrimSuffix(line, []byte("\n")), []byte(" "))
		row, err := DecodeRow(string(table), raw)
		if err != nil {
			return nil, err
		}
		if err := b.Add(string(table), row); err != nil {
			return nil, err
		}
	}
	return b.Store(), nil
}

// FuzzImportRows: rows from outside (an operator snapshot's payload, after
// its envelope is checked) are each decoded and validated against the
// rows before them; whatever they are, the import is refused with an
// error or builds a store, never panics (Builder.Store panics on a
// recount error, which validation must make impossible), and a store it
// builds exports rows that import again to the same state.
func FuzzImportRows(f *testing.F) {
	fx := newFixture(f)
	fx.claim("vol-mw", "a1", structs.ClaimWrite)
	fx.claim("vol-ro", "a2", structs.ClaimRead)
	fx.must(structs.EventAppendType, &structs.EventAppendRequest{Events: []*structs.Event{{Type: structs.EventModule, Module: "m", Message: "loaded"}}})
	good := rowLines(f, fx.s)
	if _, err := importLines(good); err != nil {
		f.Fatalf("the seed store's rows: %v", err)
	}
	f.Add(good)
	for line := range bytes.Lines(good) {
		f.Add(line)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		s, err := importLines(in)
		if err != nil {
			return
		}
		want, err := s.Digest()
		if err != nil {
			t.Fatal(err)
		}
		again, err := importLines(rowLines(t, s))
		if err != nil {
			t.Fatalf("an imported store's rows are refused on import: %v", err)
		}
		if got, _ := again.Digest(); got != want {
			t.Fatal("an imported store does not round-trip")
		}
	})
}
