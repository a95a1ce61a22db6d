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
	{`{"namespace":"default","id":"v","claims":{}}`, true},
	{`{"namespace":"default","id":"v","claims":null,"mount_flags":null,"secrets":null,"stuck":null}`, true},
	{`{"namespace":"default","id":"v","mount_flags":["ro","a\"b"],"context":{},"parameters":{"a":"1","a":"2"}}`, true},
	{`{"namespace":"default","id":"v","mount_flags":[]}`, true},
	{`{"namespace":"default","id":"v","secrets":{"k":"s"}}`, true},
	{`{"id":"v","claims":{"a1":{"alloc_id":"a1","state":"taken","attempts":-1,"create_time":"2026-12-06T03:00:00.5+01:00","publish_context":{"d":"/dev/x"},"last_error":{"kind":"csi","code":14,"time":"2026-12-06T03:00:00Z"},"hold":{"since":"0001-01-01T00:00:00Z"}},"a0":null}}`, true},
	{`{"id":"v","stuck":{"since":"2026-12-06T03:00:00Z","reason":"r","code":5,"attempts":3}}`, true},
	{`{"id":"v","claims":{"a1":{},"a1":{}}}`, false},                  // repeated claim: json keeps the last
	{`{"id":"v","claims":{"a1":{"Alloc_ID":"x"}}}`, false},            // json matches keys without case
	{`{"id":"v","claims":{"a1":{"extra":1}}}`, false},                 // unknown key: json skips it
	{`{"id":"v","claims":[]}`, false},                                 // not an object: json refuses it
	{`{"id":"v","mount_flags":["ro",]}`, false},                       // trailing comma
	{`{"id":"v","mount_flags":[1]}`, false},                           // not a string
	{`{"id":"v","stuck":{"code":4294967296}}`, false},                 // overflow of uint32
	{`{"id":"v","claims":{"a1":{"create_time":"yesterday"}}}`, false}, // not a time: json refuses it
	{`{"id":"a\u00e9"}`, false},                                       // escape beyond ASCII
	{`{"ID":"v"}`, false},                                             // json matches keys without case
	{`{"id":"a","id":"b"}`, false},                                    // repeated key: json keeps the last
	{`{"id":"a\u0062"}`, true},
	{`{"id":"a\"b"}`, true},
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
	got, _, ok := decodePlainVolume(row, newInterner())
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
	// Every volume Persist writes is read plainly.
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
		} else {
			t.Fatalf("%s: not read plainly", row)
		}
	}
	if plain != 2000 {
		t.Fatalf("%d volumes read plainly, want %d", plain, 2000)
	}
	// Shared strings come from the interner: one copy for all rows.
	in := newInterner()
	a, _, _ := decodePlainVolume([]byte(`{"namespace":"default","plugin_id":"ebs","id":"a"}`), in)
	b, _, _ := decodePlainVolume([]byte(`{"namespace":"default","plugin_id":"ebs","id":"b"}`), in)
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
