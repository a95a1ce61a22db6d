package state

import (
	"fmt"
	"strings"

	"github.com/hashicorp/go-memdb"
)

// Index keys without reflection and in one allocation (BenchmarkScale,
// BenchmarkReleaseWrites). memdb's StringFieldIndex reads a field through reflection and builds
// a key in two allocations (the string with its terminator, then its
// bytes), and its CompoundIndex builds each part that way and appends them:
// six allocations to look a volume up by namespace and ID. A release looks
// volumes, allocations and index rows up some forty times per claim (the
// leader's validation, the FSM's validation and write, the volume_mods
// bookkeeping, the watcher's reads and feed), so those allocations were a
// tenth of the objects a release allocates. The indexers below build the
// same bytes directly; anything other than the argument types the store
// uses goes to the memdb indexer they embed, so the keys, the errors and
// the prefix semantics are memdb's (TestKeyIndexersMatchMemdb).

// stringKeyIndex is a StringFieldIndex over one string field of T, read by
// a function instead of by reflection.
type stringKeyIndex[T any] struct {
	*memdb.StringFieldIndex
	field func(T) string
	// room is extra capacity for memdb to append to FromObject's key
	// without copying it (a non-unique index appends the primary key);
	// nil for none.
	room func(T) int
}

func stringKey[T any](name string, field func(T) string) stringKeyIndex[T] {
	return stringKeyIndex[T]{StringFieldIndex: &memdb.StringFieldIndex{Field: name}, field: field}
}

// FromObject implements memdb.SingleIndexer: the field and a zero byte, no
// key when the field is empty.
func (x stringKeyIndex[T]) FromObject(raw any) (bool, []byte, error) {
	obj, ok := raw.(T)
	if !ok {
		var want T
		return false, nil, fmt.Errorf("index %s: want %T, got %T", x.Field, want, raw)
	}
	s := x.field(obj)
	if s == "" {
		return false, nil, nil
	}
	n := len(s) + 1
	if x.room != nil {
		n += x.room(obj)
	}
	return true, append(append(make([]byte, 0, n), s...), 0), nil
}

// FromArgs implements memdb.Indexer.
func (x stringKeyIndex[T]) FromArgs(args ...any) ([]byte, error) {
	if len(args) == 1 {
		if s, ok := args[0].(string); ok {
			return append(append(make([]byte, 0, len(s)+1), s...), 0), nil
		}
	}
	return x.StringFieldIndex.FromArgs(args...)
}

// PrefixFromArgs implements memdb.PrefixIndexer: the argument without the
// terminator.
func (x stringKeyIndex[T]) PrefixFromArgs(args ...any) ([]byte, error) {
	if len(args) == 1 {
		if s, ok := args[0].(string); ok {
			return []byte(s), nil
		}
	}
	return x.StringFieldIndex.PrefixFromArgs(args...)
}

// FromArgs implements memdb.Indexer for volumeKeyIndexer (schema.go): both
// strings, each ended by a zero byte, in one allocation.
func (x volumeKeyIndexer) FromArgs(args ...any) ([]byte, error) {
	if len(args) == 2 {
		a, okA := args[0].(string)
		b, okB := args[1].(string)
		if okA && okB {
			key := make([]byte, 0, len(a)+len(b)+2)
			return append(append(append(append(key, a...), 0), b...), 0), nil
		}
	}
	return x.CompoundIndex.FromArgs(args...)
}

// PrefixFromArgs implements memdb.PrefixIndexer for volumeKeyIndexer: the
// first string ended by a zero byte, then the second without one (its
// prefix); or the first alone, without one.
func (x volumeKeyIndexer) PrefixFromArgs(args ...any) ([]byte, error) {
	switch len(args) {
	case 1:
		if a, ok := args[0].(string); ok {
			return []byte(a), nil
		}
	case 2:
		a, okA := args[0].(string)
		b, okB := args[1].(string)
		if okA && okB {
			key := make([]byte, 0, len(a)+len(b)+1)
			return append(append(append(key, a...), 0), b...), nil
		}
	}
	return x.CompoundIndex.PrefixFromArgs(args...)
}

// ringKeyIndex is the events' ring index: the ring's name (appendRingName)
// and the ring sequence number (hexUintIndex), with FromObject reading
// both fields directly, and the one lookup the store makes, a ring by
// prefix (ringArg), in one allocation. Other lookups go to memdb's
// CompoundIndex, which the store does not make.
type ringKeyIndex struct{ *memdb.CompoundIndex }

// appendRingName appends ring's name to key so that no ring's key is a
// prefix of another's: each zero byte of the name is followed by 0xff,
// and the name ends with a zero byte and 0x01. A ring's name holds zero
// bytes (volumeRing's separators, and any in the IDs an event names: an
// event's namespace and volume ID are the caller's), and with memdb's
// key, the name and one zero byte, the ring of volume "x\x00!" fell
// inside the prefix of volume "x"'s: a trim of x's ring deleted the other
// ring's events, the event just written among them, and a volume's
// events listed the other's.
func appendRingName(key []byte, ring string) []byte {
	for i := 0; i < len(ring); i++ {
		key = append(key, ring[i])
		if ring[i] == 0 {
			key = append(key, 0xff)
		}
	}
	return append(key, 0, 1)
}

// ringNameLen is the length appendRingName gives ring.
func ringNameLen(ring string) int { return len(ring) + strings.Count(ring, "\x00") + 2 }

func ringKey() ringKeyIndex {
	return ringKeyIndex{CompoundIndex: &memdb.CompoundIndex{Indexes: []memdb.Indexer{
		&memdb.StringFieldIndex{Field: "Ring"},
		hexUint(func(e *eventRow) uint64 { return e.RingSeq }),
	}}}
}

// FromObject implements memdb.SingleIndexer: the ring's name
// (appendRingName) and the ring sequence number in 16 hexadecimal digits;
// no key without a ring.
func (x ringKeyIndex) FromObject(raw any) (bool, []byte, error) {
	e, ok := raw.(*eventRow)
	if !ok {
		return false, nil, fmt.Errorf("ring index: want *eventRow, got %T", raw)
	}
	if e.Ring == "" {
		return false, nil, nil
	}
	key := appendRingName(make([]byte, 0, ringNameLen(e.Ring)+16), e.Ring)
	return true, appendHexUint(key, e.RingSeq), nil
}

// PrefixFromArgs implements memdb.PrefixIndexer: one string is a prefix of
// the ring's key (ringArg passes a ring's whole name, as appendRingName
// writes it).
func (x ringKeyIndex) PrefixFromArgs(args ...any) ([]byte, error) {
	if len(args) == 1 {
		if s, ok := args[0].(string); ok {
			return []byte(s), nil
		}
	}
	return x.CompoundIndex.PrefixFromArgs(args...)
}
