package state

import (
	"encoding/json"
	"reflect"
	"testing"
	"unsafe"

	"github.com/volhost/volhost/host/structs"
)

// plainVolumeRows are rows the plain reader must take (ok) or leave to
// encoding/json (not ok); either way the differential check below holds.
var plainVolumeRows = []struct {
	row string
	ok  bool
}{
	{`{"namespace":"default","id":"vol-0000001","external_id":"disk-1","plugin_id":"ebs","access_mode":"single-node-writer","attachment_mode":"file-system","create_index":102,"modify_index":101202}`, true},
	{`{"namespace":"default","id":"v","name":"n","external_id":"e","plugin_id":"ebs","access_mode":"a","attachment_mode":"b","fs_type":"ext4","create_index":0,"modify_index":18446744073709551615}`, true},
	{`{"modify_index":7,"id":"reordered","namespace":"ns"}`, true},
	{`{}`, true},
	{`{"id":""}`, true},
	{`{"namespace":"default","id":"v","claims":{}}`, false},          // a field it does not read
	{`{"namespace":"default","id":"v","mount_flags":["ro"]}`, false}, // ditto
	{`{"namespace":"default","id":"v","secrets":{"k":"s"}}`, false},  // ditto
	{`{"ID":"v"}`, false},                                     // json matches keys without case
	{`{"id":"a","id":"b"}`, false},                            // repeated key: json keeps the last
	{`{"id":"a\u0062"}`, false},                               // escape
	{`{"id":"a\"b"}`, false},                                  // escape
	{"{\"id\":\"caf\xc3\xa9\"}", false},                       // not ASCII
	{"{\"id\":\"bad\xff\"}", false},                           // invalid UTF-8: json replaces it
	{"{\"id\":\"tab\there\"}", false},                         // control byte: json refuses it
	{`{"id": "spaced"}`, false},                               // space
	{`{"id":"v","create_index":-1}`, false},                   // sign
	{`{"id":"v","create_index":01}`, false},                   // leading zero
	{`{"id":"v","create_index":1e3}`, false},                  // exponent
	{`{"id":"v","create_index":1.0}`, false},                  // fraction
	{`{"id":"v","create_index":18446744073709551616}`, false}, // overflow
	{`{"id":"v","create_index":"1"}`, false},                  // a string
	{`{"id":null}`, false},                                    // null
	{`{"id":"v",}`, false},                                    // trailing comma
	{`{"id":"v"}x`, false},                                    // trailing bytes
	{`{"id":"v"},"t":"index"`, false},                         // what a crafted line leaves after the row
	{`{"id":"v"`, false},                                      // truncated
	{`["id","v"]`, false},                                     // not an object
	{``, false},
}

// checkPlainVolume fails t if the plain reader takes row and gives
// anything but what json.Unmarshal gives (the same Volume, no error).
func checkPlainVolume(t *testing.T, row []byte) bool {
	t.Helper()
	got, ok := decodePlainVolume(row, interner{})
	if !ok {
		return false
	}
	var want structs.Volume
	if err := json.Unmarshal(row, &want); err != nil {
		t.Fatalf("%q: read plainly, but json.Unmarshal refuses it: %v", row, err)
	}
	if !reflect.DeepEqual(*got, want) {
		t.Fatalf("%q: read as %+v, json.Unmarshal gives %+v", row, *got, want)
	}
	return true
}

func TestDecodePlainVolume(t *testing.T) {
	for _, tc := range plainVolumeRows {
		if ok := checkPlainVolume(t, []byte(tc.row)); ok != tc.ok {
			t.Errorf("%q: read plainly %v, want %v", tc.row, ok, tc.ok)
		}
	}
	// Every volume Persist writes without claims or maps is read plainly.
	s := bulkLoad(t, scaleShape{volumes: 2000, claimed: 20, releasable: 2})
	vols, _ := s.Snapshot().Volumes(nil)
	plain := 0
	for _, v := range vols {
		row, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if checkPlainVolume(t, row) {
			plain++
		} else if len(v.Claims) == 0 {
			t.Fatalf("%s: a volume without claims is not read plainly", row)
		}
	}
	if plain != 2000-20 {
		t.Fatalf("%d volumes read plainly, want %d", plain, 2000-20)
	}
	// Shared strings come from the interner: one copy for all rows.
	in := interner{}
	a, _ := decodePlainVolume([]byte(`{"namespace":"default","plugin_id":"ebs","id":"a"}`), in)
	b, _ := decodePlainVolume([]byte(`{"namespace":"default","plugin_id":"ebs","id":"b"}`), in)
	if a.Namespace != "default" || !sameString(a.Namespace, b.Namespace) || !sameString(a.PluginID, b.PluginID) {
		t.Fatalf("namespace and plugin not shared: %+v %+v", a, b)
	}
}

// FuzzDecodePlainVolume: whatever the plain reader takes, json.Unmarshal
// reads the same.
func FuzzDecodePlainVolume(f *testing.F) {
	for _, tc := range plainVolumeRows {
		f.Add([]byte(tc.row))
	}
	f.Fuzz(func(t *testing.T, row []byte) { checkPlainVolume(t, row) })
}

// sameString reports whether a and b share their bytes (one interned copy).
func sameString(a, b string) bool { return unsafe.StringData(a) == unsafe.StringData(b) }
