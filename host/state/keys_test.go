package state

import (
	"bytes"
	"testing"

	"github.com/hashicorp/go-memdb"

	"github.com/volhost/volhost/host/structs"
)

// The store's own indexers (keys.go) give memdb's keys, byte for byte,
// for every object and argument list: what each embeds (a StringFieldIndex
// reading the field by reflection, a CompoundIndex) is the reference.
func TestKeyIndexersMatchMemdb(t *testing.T) {
	tables := schema().Tables
	same := func(what string, got []byte, gotErr error, want []byte, wantErr error) {
		t.Helper()
		if !bytes.Equal(got, want) || (gotErr == nil) != (wantErr == nil) {
			t.Errorf("%s: (%q, %v), memdb gives (%q, %v)", what, got, gotErr, want, wantErr)
		}
	}
	argLists := [][]any{
		{"a"}, {""}, {"ns-é"}, {"a\x00b"}, {"a", "b"}, {"", ""}, {"a", ""}, {"", "b"},
		{}, {1}, {"a", 2}, {nil}, {"a", "b", "c"},
	}
	type fromObject interface {
		FromObject(any) (bool, []byte, error)
	}
	// Each of the store's indexers with memdb's equivalent and objects to
	// index.
	for _, c := range []struct {
		table, index string
		objs         []any
	}{
		{TableAllocs, indexID, []any{&structs.Alloc{ID: "a1"}, &structs.Alloc{ID: ""}, &structs.Alloc{ID: "é\x01"}}},
		{TableAllocs, indexNode, []any{&structs.Alloc{ID: "a1", NodeID: "n1"}, &structs.Alloc{ID: "a1"}}},
		{TableNodes, indexID, []any{&structs.Node{ID: "n1"}, &structs.Node{}}},
		{TablePlugins, indexID, []any{&structs.Plugin{ID: "ebs"}, &structs.Plugin{}}},
		{TableLeftovers, indexID, []any{&structs.Leftover{ID: "ns/v/a"}, &structs.Leftover{}}},
		{TableIndex, indexID, []any{&indexRow{Key: TableVolumes, Value: 3}, &indexRow{}}},
		{tableStats, indexID, []any{&statsRow{Key: statsKey}, &statsRow{}}},
		{TableVolumes, indexID, []any{&structs.Volume{Namespace: "default", ID: "v1"}, &structs.Volume{ID: "v1"}}},
		{TableVolumes, indexExternal, []any{&structs.Volume{PluginID: "ebs", ExternalID: "disk-1"}, &structs.Volume{PluginID: "ebs"}}},
	} {
		ix := tables[c.table].Indexes[c.index].Indexer
		var ref memdb.Indexer
		switch x := ix.(type) {
		case stringKeyIndex[*structs.Alloc]:
			ref = x.StringFieldIndex
		case stringKeyIndex[*structs.Node]:
			ref = x.StringFieldIndex
		case stringKeyIndex[*structs.Plugin]:
			ref = x.StringFieldIndex
		case stringKeyIndex[*structs.Leftover]:
			ref = x.StringFieldIndex
		case stringKeyIndex[*indexRow]:
			ref = x.StringFieldIndex
		case stringKeyIndex[*statsRow]:
			ref = x.StringFieldIndex
		case volumeKeyIndexer:
			ref = x.CompoundIndex
		default:
			t.Fatalf("%s.%s: indexer %T is not one of the store's", c.table, c.index, ix)
		}
		name := c.table + "." + c.index
		for _, obj := range c.objs {
			ok, got, err := ix.(fromObject).FromObject(obj)
			wantOK, want, wantErr := ref.(fromObject).FromObject(obj)
			if ok != wantOK {
				t.Errorf("%s FromObject(%+v): ok %v, memdb gives %v", name, obj, ok, wantOK)
			}
			same(name+" FromObject", got, err, want, wantErr)
		}
		for _, args := range argLists {
			got, err := ix.FromArgs(args...)
			want, wantErr := ref.FromArgs(args...)
			same(name+" FromArgs", got, err, want, wantErr)
			if p, ok := ix.(memdb.PrefixIndexer); ok {
				got, err := p.PrefixFromArgs(args...)
				want, wantErr := ref.(memdb.PrefixIndexer).PrefixFromArgs(args...)
				same(name+" PrefixFromArgs", got, err, want, wantErr)
			}
		}
	}
}

// A lookup key is built in one allocation: memdb's StringFieldIndex took
// two per string, and its CompoundIndex six for a volume's namespace and
// ID, on every one of the forty-odd lookups of a release.
func TestKeyIndexersAllocateOnce(t *testing.T) {
	tables := schema().Tables
	vol := tables[TableVolumes].Indexes[indexID].Indexer
	alloc := tables[TableAllocs].Indexes[indexID].Indexer
	ring := tables[TableEvents].Indexes[indexRing].Indexer.(memdb.PrefixIndexer)
	a := &structs.Alloc{ID: "alloc-1", NodeID: "node-1"}
	e := &eventRow{Ring: volumeRing("default", "vol-1"), RingSeq: 9}
	// The argument lists are built once: memdb's callers build them (a
	// variadic call through an interface allocates its slice), not the
	// indexer.
	volArgs, allocArgs, ringArgs := []any{"default", "vol-1"}, []any{"alloc-1"}, []any{ringArg(volumeRing("default", "vol-1"))}
	for name, f := range map[string]func(){
		"volume FromArgs":     func() { _, _ = vol.FromArgs(volArgs...) },
		"alloc FromArgs":      func() { _, _ = alloc.FromArgs(allocArgs...) },
		"alloc FromObject":    func() { _, _, _ = alloc.(memdb.SingleIndexer).FromObject(a) },
		"ring PrefixFromArgs": func() { _, _ = ring.PrefixFromArgs(ringArgs...) },
		"ring FromObject":     func() { _, _, _ = ring.(memdb.SingleIndexer).FromObject(e) },
		"alloc node FromObject": func() {
			_, _, _ = tables[TableAllocs].Indexes[indexNode].Indexer.(memdb.SingleIndexer).FromObject(a)
		},
	} {
		if n := testing.AllocsPerRun(100, f); n > 1 {
			t.Errorf("%s: %v allocations, want 1", name, n)
		}
	}
}

// A unique volume index's key is allocated at its length; the non-unique
// external index's with room for the ID key memdb appends to it.
func TestVolumeKeyRoom(t *testing.T) {
	tables := schema().Tables
	v := &structs.Volume{Namespace: "default", ID: "vol-0000001", PluginID: "ebs", ExternalID: "disk-0000001"}
	for _, c := range []struct {
		table, index string
		room         int
	}{
		{TableVolumes, indexID, 0},
		{TableVolumes, indexExternal, primaryKeyLen(v)},
	} {
		ok, key, err := tables[c.table].Indexes[c.index].Indexer.(memdb.SingleIndexer).FromObject(v)
		if !ok || err != nil {
			t.Fatalf("%s.%s: no key: %v", c.table, c.index, err)
		}
		if got := cap(key) - len(key); got != c.room {
			t.Errorf("%s.%s: room %d after the key, want %d", c.table, c.index, got, c.room)
		}
	}
}

// The ring index's keys are not memdb's (the name and one zero byte): no
// ring's key starts with another ring's lookup argument, whatever bytes
// the IDs in its name hold, and a ring's events sort by ring sequence.
func TestRingKeysArePrefixFree(t *testing.T) {
	ix := schema().Tables[TableEvents].Indexes[indexRing].Indexer.(memdb.SingleIndexer)
	rings := []string{ringGlobal, ringAudit, volumeRing("default", "x"), volumeRing("default", "x\x00!"),
		volumeRing("default", "x\x00z"), volumeRing("default\x00x", ""), volumeRing("default", "xy"),
		volumeRing("default", "x\xff"), "v\x00default\x00x\x00\x01", ""}
	for _, a := range rings {
		for _, b := range rings {
			for _, seq := range []uint64{0, 1, 1 << 40} {
				ok, key, err := ix.FromObject(&eventRow{Ring: b, RingSeq: seq})
				if err != nil || ok != (b != "") {
					t.Fatalf("ring %q: key %q %v %v", b, key, ok, err)
				}
				if got := ok && bytes.HasPrefix(key, []byte(ringArg(a))); got != (a == b && b != "") {
					t.Errorf("ring %q's key %q under ring %q's lookup: %v, want %v", b, key, a, got, !got)
				}
			}
		}
	}
	_, k1, _ := ix.FromObject(&eventRow{Ring: volumeRing("default", "x"), RingSeq: 9})
	_, k2, _ := ix.FromObject(&eventRow{Ring: volumeRing("default", "x"), RingSeq: 10})
	if bytes.Compare(k1, k2) >= 0 {
		t.Fatalf("ring sequence 9's key %q does not sort before 10's %q", k1, k2)
	}
}
