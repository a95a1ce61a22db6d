package structs

import (
	"math"
	"slices"

	"github.com/volhost/volhost/internal/plainjson"
)

// The Read*JSON functions are the reading half of AppendJSON: they decode
// what json.Marshal writes for a value, null included (a nil pointer), on
// the hot paths that skip encoding/json's reflection (a snapshot's
// restore: host/state; the checkpoint entries every server applies:
// host/cluster). Each answers false for anything it does not take (a key
// it does not know or sees twice, a string beyond ASCII, white space),
// and its caller then decodes the whole input with encoding/json; what it
// takes it decodes exactly as encoding/json does (the callers' differential
// fuzz tests). A field added to a type without its case here is only
// slower: its key is not known, and encoding/json decodes the row.

// ReadClaimJSON reads a claim.
func ReadClaimJSON(s *plainjson.Scanner) (*Claim, bool) {
	return plainjson.Object(s, func(c *Claim, k []byte) (uint, bool) {
		switch string(k) {
		case "alloc_id":
			return 0, s.StrTo(&c.AllocID)
		case "node_id":
			return 1, s.StrTo(&c.NodeID)
		case "mode":
			return 2, enum(s, (*string)(&c.Mode))
		case "access_mode":
			return 3, enum(s, (*string)(&c.AccessMode))
		case "attachment_mode":
			return 4, enum(s, (*string)(&c.AttachmentMode))
		case "state":
			return 5, enum(s, (*string)(&c.State))
		case "external_node_id":
			return 6, s.StrTo(&c.ExternalNodeID)
		case "publish_context":
			return 7, assign(&c.PublishContext, s.StringMap)
		case "staging_path":
			return 8, s.StrTo(&c.StagingPath)
		case "target_path":
			return 9, s.StrTo(&c.TargetPath)
		case "attempts":
			return 10, assign(&c.Attempts, s.Int)
		case "next_attempt":
			return 11, s.Time(&c.NextAttempt)
		case "first_failure":
			return 12, s.Time(&c.FirstFailure)
		case "last_error":
			return 13, assign(&c.LastError, func() (*ClaimError, bool) { return ReadClaimErrorJSON(s) })
		case "skip_node_step":
			return 14, assign(&c.SkipNodeStep, s.Bool)
		case "node_unpublished":
			return 15, assign(&c.NodeUnpublished, s.Bool)
		case "fence_reason":
			return 16, s.StrTo(&c.FenceReason)
		case "hold":
			return 17, assign(&c.Hold, func() (*ClaimHold, bool) { return ReadClaimHoldJSON(s) })
		case "create_time":
			return 18, s.Time(&c.CreateTime)
		case "modify_time":
			return 19, s.Time(&c.ModifyTime)
		case "create_index":
			return 20, uint64Of(s, &c.CreateIndex)
		case "modify_index":
			return 21, uint64Of(s, &c.ModifyIndex)
		case "unattached":
			return 22, assign(&c.Unattached, s.Bool)
		case "restored":
			return 23, assign(&c.Restored, s.Bool)
		}
		return 0, false // unknown here
	})
}

// ReadClaimErrorJSON reads a claim's error.
func ReadClaimErrorJSON(s *plainjson.Scanner) (*ClaimError, bool) {
	return plainjson.Object(s, func(e *ClaimError, k []byte) (uint, bool) {
		switch string(k) {
		case "kind":
			return 0, enum(s, (*string)(&e.Kind))
		case "step":
			return 1, s.StrTo(&e.Step)
		case "code":
			return 2, uint32Of(s, &e.Code)
		case "code_name":
			return 3, s.StrTo(&e.CodeName)
		case "message":
			return 4, s.StrTo(&e.Message)
		case "module":
			return 5, s.StrTo(&e.Module)
		case "module_version":
			return 6, s.StrTo(&e.ModuleVersion)
		case "fault":
			return 7, s.StrTo(&e.Fault)
		case "fatal":
			return 8, assign(&e.Fatal, s.Bool)
		case "resent":
			return 9, assign(&e.Resent, s.Bool)
		case "time":
			return 10, s.Time(&e.Time)
		}
		return 0, false // unknown here
	})
}

// ReadClaimHoldJSON reads a claim's hold.
func ReadClaimHoldJSON(s *plainjson.Scanner) (*ClaimHold, bool) {
	return plainjson.Object(s, func(h *ClaimHold, k []byte) (uint, bool) {
		switch string(k) {
		case "module":
			return 0, s.StrTo(&h.Module)
		case "module_version":
			return 1, s.StrTo(&h.ModuleVersion)
		case "reason":
			return 2, s.StrTo(&h.Reason)
		case "since":
			return 3, s.Time(&h.Since)
		case "until":
			return 4, s.Time(&h.Until)
		}
		return 0, false // unknown here
	})
}

// ReadStuckJSON reads a volume's stuck mark.
func ReadStuckJSON(s *plainjson.Scanner) (*Stuck, bool) {
	return plainjson.Object(s, func(x *Stuck, k []byte) (uint, bool) {
		switch string(k) {
		case "since":
			return 0, s.Time(&x.Since)
		case "reason":
			return 1, s.StrTo(&x.Reason)
		case "alloc_id":
			return 2, s.StrTo(&x.AllocID)
		case "node_id":
			return 3, s.StrTo(&x.NodeID)
		case "module":
			return 4, s.StrTo(&x.Module)
		case "fault":
			return 5, s.StrTo(&x.Fault)
		case "code":
			return 6, uint32Of(s, &x.Code)
		case "code_name":
			return 7, s.StrTo(&x.CodeName)
		case "attempts":
			return 8, assign(&x.Attempts, s.Int)
		}
		return 0, false // unknown here
	})
}

// ReadAllocJSON reads an allocation.
func ReadAllocJSON(s *plainjson.Scanner) (*Alloc, bool) {
	return plainjson.Object(s, func(a *Alloc, k []byte) (uint, bool) {
		switch string(k) {
		case "id":
			return 0, s.StrTo(&a.ID)
		case "namespace":
			return 1, enum(s, &a.Namespace)
		case "node_id":
			return 2, s.StrTo(&a.NodeID)
		case "job_id":
			return 3, s.StrTo(&a.JobID)
		case "client_status":
			return 4, enum(s, (*string)(&a.ClientStatus))
		case "source":
			return 5, enum(s, &a.Source)
		case "modify_time":
			return 6, s.Time(&a.ModifyTime)
		case "create_index":
			return 7, uint64Of(s, &a.CreateIndex)
		case "modify_index":
			return 8, uint64Of(s, &a.ModifyIndex)
		}
		return 0, false // unknown here
	})
}

// ReadEventJSON reads an event.
func ReadEventJSON(s *plainjson.Scanner) (*Event, bool) {
	return plainjson.Object(s, func(e *Event, k []byte) (uint, bool) {
		switch string(k) {
		case "index":
			return 0, uint64Of(s, &e.Index)
		case "time":
			return 1, s.Time(&e.Time)
		case "type":
			return 2, enum(s, &e.Type)
		case "namespace":
			return 3, enum(s, &e.Namespace)
		case "volume_id":
			return 4, s.StrTo(&e.VolumeID)
		case "alloc_id":
			return 5, s.StrTo(&e.AllocID)
		case "node_id":
			return 6, s.StrTo(&e.NodeID)
		case "plugin_id":
			return 7, s.StrTo(&e.PluginID)
		case "module":
			return 8, s.StrTo(&e.Module)
		case "message":
			return 9, s.StrTo(&e.Message)
		case "fields":
			return 10, assign(&e.Fields, s.StringMap)
		}
		return 0, false // unknown here
	})
}

// assign stores what read reads into dst.
func assign[T any](dst *T, read func() (T, bool)) bool {
	v, ok := read()
	*dst = v
	return ok
}

func uint64Of(s *plainjson.Scanner, dst *uint64) bool {
	x, ok := s.Uint(math.MaxUint64)
	*dst = x
	return ok
}

func uint32Of(s *plainjson.Scanner, dst *uint32) bool {
	x, ok := s.Uint(math.MaxUint32)
	*dst = uint32(x)
	return ok
}

// enumerations are the values a field takes from a small set (the
// claim's modes and states, an error's kind, the default namespace, an
// allocation's status, an event's type), by themselves: decoded, each is
// the constant's own string rather than a copy per row.
var enumerations = func() map[string]string {
	m := map[string]string{"default": "default"}
	for _, e := range slices.Concat([]string{
		string(ClaimRead), string(ClaimWrite),
		string(AccessSingleNodeReader), string(AccessSingleNodeWriter), string(AccessMultiNodeReader),
		string(AccessMultiNodeSingleWrite), string(AccessMultiNodeMultiWrite),
		string(AttachFilesystem), string(AttachBlockDevice),
		string(ClaimPublishing), string(ClaimTaken), string(ClaimNodeDetached), string(ClaimControllerDetached), string(ClaimReadyToFree),
		string(ErrorCSI), string(ErrorModule), string(ErrorPrecondition),
	}, EventTypes) {
		m[e] = e
	}
	for _, st := range AllocClientStatuses {
		m[string(st)] = string(st)
	}
	return m
}()

// enum is str for a field of few values: a known value is its constant
// (the same string, so the same decoded value).
func enum(s *plainjson.Scanner, dst *string) bool {
	v, ok := s.Str()
	if !ok {
		return false
	}
	if e, known := enumerations[string(v)]; known { // no allocation for the lookup
		*dst = e
	} else {
		*dst = string(v)
	}
	return true
}
