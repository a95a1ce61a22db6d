package state

import (
	"fmt"

	"github.com/volhost/volhost/host/structs"
)

// A type filter on the events (GET /v1/events?type=module, which the web
// UI's overview polls) used to scan the events table from its oldest event
// for matches: with the volume rings full (up to DefaultMaxVolumeEvents of
// claim transitions) a filter for a type that is rare among them read
// every event, 55 ms at 100,000 volumes after 10,000 releases and O(the
// table) beyond. The type index keys every event but the claim transitions
// by type and sequence number, so such a filter reads only its matches.
// Claim transitions are most of the table and written on every release
// checkpoint: they are left out (a filter for them scans by sequence
// number, where nearly every event matches), so the writes a release makes
// pay no third radix insert per event.

// indexType is the events' type index (eventTypeIndex).
const indexType = "type"

// typeIndexed reports whether the type index holds events of type t.
func typeIndexed(t string) bool { return t != structs.EventClaimTransition }

// eventTypeIndex keys an event by its type, a zero byte and its sequence
// number in 16 hexadecimal digits (so a type's events come in sequence
// order); no key for a claim transition.
type eventTypeIndex struct{}

// FromObject implements memdb.SingleIndexer.
func (eventTypeIndex) FromObject(raw any) (bool, []byte, error) {
	e, ok := raw.(*eventRow)
	if !ok {
		return false, nil, fmt.Errorf("type index: want *eventRow, got %T", raw)
	}
	if e.Event == nil || !typeIndexed(e.Event.Type) {
		return false, nil, nil
	}
	return true, typeKey(e.Event.Type, e.Seq), nil
}

// FromArgs implements memdb.Indexer: a type and the sequence number to
// start at (what LowerBound takes).
func (eventTypeIndex) FromArgs(args ...any) ([]byte, error) {
	if len(args) != 2 {
		return nil, fmt.Errorf("type index: want a type and a sequence number, got %d arguments", len(args))
	}
	t, ok1 := args[0].(string)
	seq, ok2 := args[1].(uint64)
	if !ok1 || !ok2 {
		return nil, fmt.Errorf("type index: want (string, uint64), got (%T, %T)", args[0], args[1])
	}
	return typeKey(t, seq), nil
}

func typeKey(t string, seq uint64) []byte {
	key := append(append(make([]byte, 0, len(t)+1+16), t...), 0)
	return appendHexUint(key, seq)
}
