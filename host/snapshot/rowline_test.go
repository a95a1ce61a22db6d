package snapshot

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/volhost/volhost/host/structs"
)

// Each row line is the bytes json.Marshal gives for the row (the format's
// definition, which snapshots already saved were written with): every row
// kind of testStore, sealed or not, and a row whose strings need HTML
// escaping.
func TestRowWriterWritesWhatMarshalWrites(t *testing.T) {
	s := testStore(t)
	aead, err := newAEAD(newKeyring(t)["k1"])
	if err != nil {
		t.Fatal(err)
	}
	var got, want bytes.Buffer
	lw := newRowWriter(&got)
	rows := 0
	add := func(table string, obj any, sl *sealed) {
		t.Helper()
		if err := lw.write(table, obj, sl); err != nil {
			t.Fatal(err)
		}
		r := row{Table: table, Sealed: sl}
		b, err := json.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		r.Row = b
		line, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		want.Write(append(line, '\n'))
		rows++
	}
	if err := s.Snapshot().Rows(func(table string, obj any) error {
		var sl *sealed
		if v, ok := obj.(*structs.Volume); ok && len(v.Secrets) > 0 {
			if sl, err = seal(aead, v); err != nil {
				return err
			}
			c := *v
			c.Secrets = nil
			obj = &c
		}
		add(table, obj, sl)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	add("volumes", &structs.Volume{Namespace: "default", ID: "<v&>", Name: "a\u2028b\"c"}, &sealed{Nonce: []byte{1, 2}, CT: []byte("<&>")})
	if rows < 10 {
		t.Fatalf("only %d rows compared", rows)
	}
	if !bytes.Equal(got.Bytes(), want.Bytes()) {
		t.Fatalf("row lines differ from json.Marshal's:\n got %s\nwant %s", got.Bytes(), want.Bytes())
	}
}
