package state

import (
	"fmt"

	"github.com/hashicorp/go-memdb"

	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/internal/plainjson"
)

// Table names. TableIndex is internal bookkeeping (table name -> raft index
// of its last write) but is exported so blocking-query callers can name it.
const (
	TableVolumes   = "volumes"
	TableAllocs    = "allocs"
	TableNodes     = "nodes"
	TablePlugins   = "plugins"
	TableEvents    = "events"
	TableLeftovers = "leftovers"
	TableIndex     = "index"
)

// Index names inside the tables.
const (
	indexID       = "id"
	indexExternal = "external"
	indexNode     = "node"
	indexRing     = "ring"
	indexMachine  = "machine"
)

// indexRow is one row of the index table.
type indexRow struct {
	Key   string `json:"key"`
	Value uint64 `json:"value"`
}

// eventRow wraps an event with a store-assigned sequence number: several
// events may share one raft index, so the index alone is not a key.
//
// Ring and RingSeq place it in its retention ring (events.go); rows from
// snapshots older than rings get both on restore.
type eventRow struct {
	Seq     uint64         `json:"seq"`
	Index   uint64         `json:"index"`
	Ring    string         `json:"ring,omitempty"`
	RingSeq uint64         `json:"ring_seq,omitempty"`
	Event   *structs.Event `json:"event"`
}

func schema() *memdb.DBSchema {
	// The ID indexes read their field directly (keys.go): every table a
	// release writes or reads by ID is here.
	id := func(ix memdb.Indexer) *memdb.IndexSchema {
		return &memdb.IndexSchema{Name: indexID, Unique: true, Indexer: ix}
	}
	s := &memdb.DBSchema{Tables: map[string]*memdb.TableSchema{
		TableVolumes: {
			Name: TableVolumes,
			Indexes: map[string]*memdb.IndexSchema{
				indexID: {Name: indexID, Unique: true, Indexer: volumeKey(func(v *structs.Volume) (string, string) { return v.Namespace, v.ID },
					"Namespace", "ID")},
				// The disk behind a volume: registration refuses a second
				// volume on the same plugin and external ID (two volumes,
				// one disk) without scanning the plugin's volumes.
				// Not unique: a snapshot from before the check may hold
				// such a pair, and a restore must not lose it. Its plugin
				// prefix also lists a plugin's volumes: a separate plugin
				// index cost every volume a fourth radix entry (about 20%
				// of the store's memory and restore time at 1,000,000
				// volumes, BenchmarkScale) for one rare read (plugin deregister).
				indexExternal: {Name: indexExternal, Indexer: volumeKey(func(v *structs.Volume) (string, string) { return v.PluginID, v.ExternalID },
					"PluginID", "ExternalID").withIDRoom()},
				// No index on ModifyIndex: "volumes modified since N" reads
				// the volume_mods table (volume_mods.go), a row per raft
				// index rather than a radix entry per volume (BenchmarkScale).
				// No index on the claims' allocs and nodes: the claims table
				// (claims.go) answers those, written only when the set of
				// claims changes, not on every volume write (BenchmarkReleaseWrites).
			},
		},
		TableAllocs: {
			Name: TableAllocs,
			Indexes: map[string]*memdb.IndexSchema{
				indexID: id(stringKey("ID", func(a *structs.Alloc) string { return a.ID })),
				indexNode: {Name: indexNode, Indexer: stringKeyIndex[*structs.Alloc]{
					StringFieldIndex: &memdb.StringFieldIndex{Field: "NodeID"},
					field:            func(a *structs.Alloc) string { return a.NodeID },
					room:             func(a *structs.Alloc) int { return len(a.ID) + 1 }, // memdb appends the ID key
				}},
			},
		},
		TableNodes: {Name: TableNodes, Indexes: map[string]*memdb.IndexSchema{
			indexID: id(stringKey("ID", func(n *structs.Node) string { return n.ID })),
			// The machine behind a node, per plugin: a node upsert refuses a
			// second node with the same plugin and external node ID without
			// scanning the nodes. Not unique: a snapshot from before the
			// check may hold such a pair, and a restore must not lose it.
			indexMachine: {Name: indexMachine, AllowMissing: true, Indexer: nodeMachineIndex{}},
		}},
		TablePlugins:   {Name: TablePlugins, Indexes: map[string]*memdb.IndexSchema{indexID: id(stringKey("ID", func(p *structs.Plugin) string { return p.ID }))}},
		TableLeftovers: {Name: TableLeftovers, Indexes: map[string]*memdb.IndexSchema{indexID: id(stringKey("ID", func(l *structs.Leftover) string { return l.ID }))}},
		TableEvents: {
			Name: TableEvents,
			Indexes: map[string]*memdb.IndexSchema{
				indexID: {Name: indexID, Unique: true, Indexer: hexUint(func(e *eventRow) uint64 { return e.Seq })},
				// No index on the raft index: every event written paid a
				// third radix insert (and its writable-node cache) for it,
				// and its one reader (Snapshot.Events, tests and tools)
				// scans the sequence index instead; the API's event
				// stream filters by index on a scan already.
				indexRing: {Name: indexRing, Unique: true, Indexer: ringKey()},
				// Every event but the claim transitions (event_types.go).
				indexType: {Name: indexType, Unique: true, AllowMissing: true, Indexer: eventTypeIndex{}},
			},
		},
		TableIndex:      {Name: TableIndex, Indexes: map[string]*memdb.IndexSchema{indexID: id(stringKey("Key", func(r *indexRow) string { return r.Key }))}},
		tableStats:      statsTableSchema(),
		tableVolumeMods: volumeModsTableSchema(),
		tableClaims:     claimsTableSchema(),
		tableNodeClaims: nodeClaimsTableSchema(),
		tableStuck:      stuckTableSchema(),
	}}
	addACLTables(s.Tables)
	addSchedulerTables(s.Tables)
	return s
}

// volumeKeyIndexer is memdb's CompoundIndex of two StringFieldIndexes over
// a volume's fields, with FromObject reading the fields directly instead of
// through reflection, in one allocation: the volumes table's two indexes on
// every volume are built on each volume write and a million times on a
// restore (BenchmarkScale). The keys are byte for byte the CompoundIndex's
// (TestVolumeKeyIndexer); so are FromArgs and PrefixFromArgs (keys.go),
// built in one allocation too.
type volumeKeyIndexer struct {
	*memdb.CompoundIndex
	fields func(*structs.Volume) (string, string)
	// idRoom: memdb appends the volume's ID key to this index's keys (a
	// non-unique index), so they are allocated with room for it. A unique
	// index's keys are allocated at their length: the room, unused, took
	// a key of the ID index from the 24-byte size class to the 48 (24 B
	// per volume, BenchmarkScaleHeap).
	idRoom bool
}

// withIDRoom is x for a non-unique index (idRoom).
func (x volumeKeyIndexer) withIDRoom() volumeKeyIndexer {
	x.idRoom = true
	return x
}

func volumeKey(fields func(*structs.Volume) (string, string), first, second string) volumeKeyIndexer {
	return volumeKeyIndexer{CompoundIndex: &memdb.CompoundIndex{Indexes: []memdb.Indexer{
		&memdb.StringFieldIndex{Field: first},
		&memdb.StringFieldIndex{Field: second},
	}}, fields: fields}
}

// FromObject implements memdb.SingleIndexer: both fields, each ended by a
// zero byte; no key when either is empty (as a StringFieldIndex has none).
func (x volumeKeyIndexer) FromObject(raw any) (bool, []byte, error) {
	v, ok := raw.(*structs.Volume)
	if !ok {
		return false, nil, fmt.Errorf("volume index: want *structs.Volume, got %T", raw)
	}
	a, b := x.fields(v)
	if a == "" || b == "" {
		return false, nil, nil
	}
	room := 0
	if x.idRoom {
		room = primaryKeyLen(v)
	}
	key := make([]byte, 0, len(a)+len(b)+2+room)
	key = append(append(append(append(key, a...), 0), b...), 0)
	return true, key, nil
}

// primaryKeyLen is the length of v's ID index key, which memdb appends to
// the key of a non-unique index: such keys are allocated with room for it
// (idRoom), so the append does not copy them again.
func primaryKeyLen(v *structs.Volume) int { return len(v.Namespace) + len(v.ID) + 2 }

// hexUintIndex indexes an unsigned field as 16 hexadecimal digits: the
// order of memdb's UintFieldIndex (8 bytes, big endian), and the same
// arguments, but a radix node has at most 16 children where a byte gives
// 256. The keys that use it (event sequence numbers, raft indexes) grow by
// one at a time, so every insert copies the last node of that path: a copy
// of 16 edges, not of up to 256 (4 KiB), per index per write (what a write
// allocates is what a server's RSS runs ahead of its heap by;
// BenchmarkReleaseWrites).
type hexUintIndex[T any] struct{ field func(T) uint64 }

func hexUint[T any](field func(T) uint64) hexUintIndex[T] { return hexUintIndex[T]{field: field} }

func appendHexUint(key []byte, v uint64) []byte {
	const digits = "0123456789abcdef"
	for shift := 60; shift >= 0; shift -= 4 {
		key = append(key, digits[v>>uint(shift)&0xf])
	}
	return key
}

// FromObject implements memdb.SingleIndexer.
func (x hexUintIndex[T]) FromObject(raw any) (bool, []byte, error) {
	obj, ok := raw.(T)
	if !ok {
		var want T
		return false, nil, fmt.Errorf("index: want %T, got %T", want, raw)
	}
	return true, appendHexUint(make([]byte, 0, 16), x.field(obj)), nil
}

// FromArgs implements memdb.Indexer: one unsigned integer.
func (x hexUintIndex[T]) FromArgs(args ...any) ([]byte, error) {
	if len(args) != 1 {
		return nil, fmt.Errorf("index: want one argument, got %d", len(args))
	}
	var v uint64
	switch a := args[0].(type) {
	case uint64:
		v = a
	case uint:
		v = uint64(a)
	case uint32:
		v = uint64(a)
	case uint16:
		v = uint64(a)
	case uint8:
		v = uint64(a)
	default:
		return nil, fmt.Errorf("index: want an unsigned integer argument, got %T", args[0])
	}
	return appendHexUint(make([]byte, 0, 16), v), nil
}

// nodeMachineIndex indexes a node by each (plugin ID, external node ID)
// pair it reports (structs.Machine): a key per plugin with an external
// node ID, each field ended by a zero byte.
type nodeMachineIndex struct{}

func machineKey(m structs.Machine) []byte {
	return append(append(append(append(make([]byte, 0, len(m.PluginID)+len(m.ExternalNodeID)+2),
		m.PluginID...), 0), m.ExternalNodeID...), 0)
}

// FromObject implements memdb.MultiIndexer.
func (nodeMachineIndex) FromObject(raw any) (bool, [][]byte, error) {
	n, ok := raw.(*structs.Node)
	if !ok {
		return false, nil, fmt.Errorf("machine index: want *structs.Node, got %T", raw)
	}
	ms := n.Machines()
	if len(ms) == 0 {
		return false, nil, nil
	}
	keys := make([][]byte, len(ms))
	for i, m := range ms {
		keys[i] = machineKey(m)
	}
	return true, keys, nil
}

// FromArgs implements memdb.Indexer: one structs.Machine.
func (nodeMachineIndex) FromArgs(args ...any) ([]byte, error) {
	if len(args) != 1 {
		return nil, fmt.Errorf("machine index: want one argument, got %d", len(args))
	}
	m, ok := args[0].(structs.Machine)
	if !ok {
		return nil, fmt.Errorf("machine index: want a structs.Machine, got %T", args[0])
	}
	return machineKey(m), nil
}

// AppendJSON writes r as json.Marshal does (a snapshot has an event row
// per event kept: host/structs' AppendJSON).
func (r *eventRow) AppendJSON(w *plainjson.Writer) {
	if r == nil {
		w.Raw("null")
		return
	}
	w.Open()
	w.Key("seq")
	w.Uint(r.Seq)
	w.Key("index")
	w.Uint(r.Index)
	w.Optional("ring", r.Ring)
	if r.RingSeq != 0 {
		w.Key("ring_seq")
		w.Uint(r.RingSeq)
	}
	w.Key("event")
	r.Event.AppendJSON(w)
	w.Close()
}
