package cluster

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/volhost/volhost/host/state"
	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/internal/testutil"
)

// fuzzTypes are every message type the store applies, plus the ACL ones.
var fuzzTypes = []structs.MessageType{
	structs.PluginUpsertType, structs.NodeUpsertType, structs.VolumeRegisterType, structs.VolumeDeregisterType,
	structs.AllocUpsertType, structs.VolumeClaimType, structs.ClaimCheckpointType, structs.VolumeStuckType,
	structs.ClaimGCType, structs.LeftoversClearType, structs.EventAppendType, structs.NodeStatusUpdateType,
	structs.PluginDeregisterType, structs.NodeDeregisterType, structs.AllocDeleteType, structs.VolumeClaimRemoveType,
	structs.NodeFenceType, structs.NodeLivenessType, structs.ClaimCheckpointBatchType,
	structs.ACLBootstrapType, structs.ACLPolicyUpsertType, structs.ACLPolicyDeleteType,
	structs.ACLTokenUpsertType, structs.ACLTokenDeleteType,
}

// baseEntries are testdata/base.json as log entries, applied before each
// fuzzed one so that it meets volumes, claims, nodes and plugins.
func baseEntries(t testing.TB, now time.Time) [][]byte {
	b := readBase(t)
	var out [][]byte
	add := func(typ structs.MessageType, req any) {
		e, err := encodeCommand(typ, now, req)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, e)
	}
	for _, p := range b.Plugins {
		add(structs.PluginUpsertType, &structs.PluginUpsertRequest{Plugin: p})
	}
	for _, n := range b.Nodes {
		add(structs.NodeUpsertType, &structs.NodeUpsertRequest{Node: n})
	}
	add(structs.AllocUpsertType, &structs.AllocUpsertRequest{Allocs: b.Allocs})
	add(structs.VolumeRegisterType, &structs.VolumeRegisterRequest{Volumes: b.Volumes})
	return out
}

// FuzzFSMApply: a log entry of any bytes, applied to a store holding
// testdata/base.json, is an error response or applied, never a panic in
// the FSM (which would stop every replica at the same entry, and again
// after each restart), and an entry refused leaves the state as it was.
func FuzzFSMApply(f *testing.F) {
	now := time.Date(2026, 12, 2, 4, 0, 0, 0, time.UTC)
	base := baseEntries(f, now)
	for _, e := range base {
		f.Add(e)
	}
	for _, typ := range fuzzTypes {
		req, err := newRequest(typ)
		if err != nil {
			f.Fatal(err)
		}
		for _, filled := range []bool{false, true} {
			if filled {
				testutil.Fill(reflect.ValueOf(req).Elem(), now)
			}
			e, err := encodeCommand(typ, now, req)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(e)
		}
		// A request whose pointers and list items are null.
		f.Add(append([]byte{byte(typ)}, fmt.Sprintf(`{"time":"2026-12-02T04:00:00Z","req":%s}`, nulls(reflect.TypeOf(req).Elem()))...))
	}
	claim, err := encodeCommand(structs.VolumeClaimType, now, claimReq("vol-ebs", "a1", "n1"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(claim)
	f.Fuzz(func(t *testing.T, entry []byte) {
		s := state.NewStore()
		// An unknown type stops the FSM (halt.go) without changing the
		// state: the check below covers it.
		fs := &fsm{store: s, meta: newMeta(), logger: hclog.NewNullLogger(), halt: func(error) {}}
		for i, e := range base {
			if res := fs.Apply(&raft.Log{Index: uint64(i + 1), Term: 1, Type: raft.LogCommand, Data: e}).(fsmResult); res.err != nil {
				t.Fatalf("base entry %d: %v", i, res.err)
			}
		}
		before := digest(t, s)
		res := fs.Apply(&raft.Log{Index: uint64(len(base) + 1), Term: 1, Type: raft.LogCommand, Data: entry}).(fsmResult)
		if res.err != nil && len(entry) > 0 && (!isMetaType(entry[0]) || fs.halted != nil) {
			if after := digest(t, s); after != before {
				t.Fatalf("entry refused (%v), and the state changed", res.err)
			}
		}
	})
}

// nulls renders a JSON object of type t whose every pointer, slice and
// map field is null or a list of one null.
func nulls(t reflect.Type) string {
	out := "{"
	for i := range t.NumField() {
		fld := t.Field(i)
		if !fld.IsExported() {
			continue
		}
		name := fld.Name
		if tag := fld.Tag.Get("json"); tag != "" && tag != "-" {
			if n, _, _ := strings.Cut(tag, ","); n != "" {
				name = n
			}
		}
		v := "null"
		if fld.Type.Kind() == reflect.Slice && fld.Type.Elem().Kind() == reflect.Pointer {
			v = "[null]"
		}
		if fld.Type.Kind() == reflect.Map && fld.Type.Elem().Kind() == reflect.Pointer {
			v = `{"k":null}`
		}
		if len(out) > 1 {
			out += ","
		}
		out += fmt.Sprintf("%q:%s", name, v)
	}
	return out + "}"
}
