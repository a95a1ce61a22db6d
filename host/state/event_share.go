package state

import (
	"encoding/binary"

	"github.com/volhost/volhost/host/structs"
)

// A stored event used to hold its own copy of everything it repeats: the
// name of its ring, built for each event (writer.event now takes the name
// from the ring's last event), the message of a claim
// transition (a handful of texts, "claim taken -> node-detached" and its
// siblings) and its map of fields, which for a claim transition takes a
// few values of a few keys ({"attempts":"0","from":"taken","state":
// "node-detached"}). A map alone is a header and a group of eight slots,
// about 330 bytes and two heap objects. The volume events' cap keeps up to
// 200,000 of them, and at 1,000,000 volumes those were what a server's
// collector paid for most beyond the volumes: a cap of 50,000 released a
// third faster (BENCHMARKS.md "The volume events' cap at 1,000,000
// volumes"). So a stored event shares them with the events before it,
// as the volumes' repeated fields are shared (intern.go).
//
// Shared maps are never written to: an event's fields are complete when
// it is stored (writer.event), and nothing changes a stored row.

// maxSharedFields bounds a fieldsTable. Past it the table starts again
// empty: the maps it forgets stay with the events that hold them, and the
// values repeated now are shared from then on. A table grows past a few
// hundred entries only with fields that rarely repeat (error texts).
const maxSharedFields = 4096

// maxSharedFieldsKey is the longest key a map is shared under: a map
// with long values (an error's text) rarely repeats, and keying it would
// cost more than it saves.
const maxSharedFieldsKey = 256

// maxSharedFieldsEntries is the most entries a shared map has: the
// events' maps have a handful, and appendFieldsKey sorts them in place.
const maxSharedFieldsEntries = 8

// fieldsTable shares equal maps of event fields. Not safe for concurrent
// use: the store's is used under its write lock, and each of a restore's
// decoding goroutines has its own (interner).
type fieldsTable struct {
	maps map[string]map[string]string
	key  []byte // scratch
}

// share answers the table's map equal to f, or f, which it then shares.
func (t *fieldsTable) share(f map[string]string) map[string]string {
	if len(f) == 0 || len(f) > maxSharedFieldsEntries {
		return f
	}
	key, ok := appendFieldsKey(t.key[:0], f)
	t.key = key
	if !ok {
		return f
	}
	if m, found := t.maps[string(key)]; found {
		return m
	}
	if t.maps == nil || len(t.maps) >= maxSharedFields {
		t.maps = make(map[string]map[string]string)
	}
	t.maps[string(key)] = f
	return f
}

// appendFieldsKey appends f's entries in key order, each string with its
// length before it, so no two different maps have one key. It reports
// false past maxSharedFieldsKey bytes.
func appendFieldsKey(b []byte, f map[string]string) ([]byte, bool) {
	var keys [maxSharedFieldsEntries]string
	n := 0
	for k := range f {
		// Insertion sort: share passes at most maxSharedFieldsEntries.
		i := n
		for ; i > 0 && keys[i-1] > k; i-- {
			keys[i] = keys[i-1]
		}
		keys[i] = k
		n++
	}
	for _, k := range keys[:n] {
		v := f[k]
		if len(b)+len(k)+len(v)+2*binary.MaxVarintLen64 > maxSharedFieldsKey {
			return b, false
		}
		b = binary.AppendUvarint(b, uint64(len(k)))
		b = append(b, k...)
		b = binary.AppendUvarint(b, uint64(len(v)))
		b = append(b, v...)
	}
	return b, true
}

// shareEvent shares r's repeated strings through share and its fields
// through fields; r and its event are the write's (or the restore's)
// own, not yet stored. Only strings with few distinct values go through
// share (a write's is Go's unique package, whose every entry the collector
// tracks): not the ring's name, one per volume, nor a message other than
// a claim transition's, which carry reasons and errors.
func shareEvent(r *eventRow, share func(string) string, fields *fieldsTable) {
	e := r.Event
	if e == nil {
		return
	}
	e.Type = share(e.Type)
	e.Namespace = share(e.Namespace)
	e.PluginID = share(e.PluginID)
	e.NodeID = share(e.NodeID)
	if e.Type == structs.EventClaimTransition {
		e.Message = share(e.Message)
	}
	e.Fields = fields.share(e.Fields)
}
