package cluster

import (
	"math"
	"time"

	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/internal/plainjson"
)

// decodeCheckpoint decodes body, the request of a ClaimCheckpointType or
// ClaimCheckpointBatchType entry, when it has the plain shape json.Marshal
// writes for a release's checkpoints: objects of known keys, each once,
// strings of printable ASCII with no escape, integers, booleans, RFC 3339
// times and null for a nil pointer, map or slice; no white space. ok is
// false for any other body, which the caller then decodes with
// encoding/json; what this accepts it decodes exactly as encoding/json
// would (FuzzDecodeCheckpoint compares the two on any bytes), so no
// replica can apply an entry differently whichever path it takes, and the
// log's format does not change.
//
// Why: checkpoints are the log entries of a release, about three per
// released claim, and every server applies each. encoding/json makes a
// validating scan and then a reflective decode; this takes a fraction of
// its time and allocations (BenchmarkDecodeCheckpoint). Only these
// two types have it: other entries are rare or carry what this does not
// take.
func decodeCheckpoint(t structs.MessageType, body []byte) (req any, ok bool) {
	s := jsonScan{plainjson.Scanner{B: body}}
	switch t {
	case structs.ClaimCheckpointType:
		// A body of null is left to encoding/json, which leaves the
		// request it decodes into as it was (empty); checkpoint's nil
		// would reach the FSM as a nil request.
		r, ok := s.checkpoint()
		if ok && r != nil && s.Done() {
			return r, true
		}
	case structs.ClaimCheckpointBatchType:
		r, ok := s.batch()
		if ok && s.Done() {
			return r, true
		}
	}
	return nil, false
}

// jsonScan reads a checkpoint's values with the plain scanner; every reader
// returns false for what it does not take, leaving the caller to give up.
type jsonScan struct{ plainjson.Scanner }

// object reads null (a nil *T, as encoding/json leaves a pointer field) or
// an object into a new T, handing field each key with the scanner at its
// value. field reads the value and answers the key's bit (its place in
// T) and whether it read it: a key it does not know is refused, and so is
// a key whose bit was seen before in the object (encoding/json applies a
// repeated key again, merging into a pointer it already set, which this
// does not reproduce). A refused object is left to encoding/json, whose
// case folding and skipping of unknown keys then decide.
func object[T any](s *jsonScan, field func(v *T, k []byte) (bit uint, ok bool)) (*T, bool) {
	if s.Literal("null") {
		return nil, true
	}
	v := new(T)
	var seen uint32
	if !s.Fields(func(k []byte) bool {
		bit, ok := field(v, k)
		if !ok || seen&(1<<bit) != 0 {
			return false
		}
		seen |= 1 << bit
		return true
	}) {
		return nil, false
	}
	return v, true
}

// assign stores what read reads into dst.
func assign[T any](dst *T, read func() (T, bool)) bool {
	v, ok := read()
	*dst = v
	return ok
}

// str reads a plain string into dst (a named string type converts).
func (s *jsonScan) str(dst *string) bool {
	v, ok := s.Str()
	if ok {
		*dst = string(v)
	}
	return ok
}

// enumerations are the values of the claim's enumerated fields, which
// every checkpoint carries: decoded, each is the constant's own string
// rather than a copy per field and checkpoint.
var enumerations = []string{
	string(structs.ClaimRead), string(structs.ClaimWrite),
	string(structs.AccessSingleNodeReader), string(structs.AccessSingleNodeWriter), string(structs.AccessMultiNodeReader),
	string(structs.AccessMultiNodeSingleWrite), string(structs.AccessMultiNodeMultiWrite),
	string(structs.AttachFilesystem), string(structs.AttachBlockDevice),
	string(structs.ClaimPublishing), string(structs.ClaimTaken), string(structs.ClaimNodeDetached), string(structs.ClaimControllerDetached), string(structs.ClaimReadyToFree),
	string(structs.ErrorCSI), string(structs.ErrorModule), string(structs.ErrorPrecondition),
}

// enum is str for an enumerated field: a known value is its constant
// (the same string, so the same decoded value).
func (s *jsonScan) enum(dst *string) bool {
	v, ok := s.Str()
	if !ok {
		return false
	}
	for _, e := range enumerations {
		if string(v) == e {
			*dst = e
			return true
		}
	}
	*dst = string(v)
	return true
}

func (s *jsonScan) uint64(dst *uint64) bool {
	x, ok := s.Uint(math.MaxUint64)
	*dst = x
	return ok
}

func (s *jsonScan) uint32(dst *uint32) bool {
	x, ok := s.Uint(math.MaxUint32)
	*dst = uint32(x)
	return ok
}

func (s *jsonScan) int(dst *int) bool {
	if s.Byte('-') {
		x, ok := s.Uint(uint64(math.MaxInt) + 1)
		*dst = int(-int64(x)) // -(MaxInt+1) wraps to itself: MinInt
		return ok
	}
	x, ok := s.Uint(math.MaxInt)
	*dst = int(x)
	return ok
}

func (s *jsonScan) bool(dst *bool) bool {
	switch {
	case s.Literal("true"):
		*dst = true
	case s.Literal("false"):
		*dst = false
	default:
		return false
	}
	return true
}

// time reads a plain string and hands it, quotes included, to
// time.Time.UnmarshalJSON, as encoding/json does.
func (s *jsonScan) time(dst *time.Time) bool {
	start := s.I
	if _, ok := s.Str(); !ok {
		return false
	}
	return dst.UnmarshalJSON(s.B[start:s.I]) == nil
}

func (s *jsonScan) batch() (*structs.ClaimCheckpointBatchRequest, bool) {
	r := &structs.ClaimCheckpointBatchRequest{}
	seen := false // its one key, once (see object)
	ok := s.Fields(func(k []byte) bool {
		if string(k) != "checkpoints" || seen {
			return false
		}
		seen = true
		if s.Literal("null") {
			return true
		}
		if !s.Byte('[') {
			return false
		}
		// encoding/json makes an empty array an empty slice, not nil.
		r.Checkpoints = []*structs.ClaimCheckpointRequest{}
		for !s.Byte(']') {
			if len(r.Checkpoints) > 0 && !s.Byte(',') {
				return false
			}
			c, ok := s.checkpoint()
			if !ok {
				return false
			}
			r.Checkpoints = append(r.Checkpoints, c)
		}
		return true
	})
	if !ok {
		return nil, false
	}
	return r, true
}

func (s *jsonScan) checkpoint() (*structs.ClaimCheckpointRequest, bool) {
	return object(s, func(r *structs.ClaimCheckpointRequest, k []byte) (uint, bool) {
		switch string(k) {
		case "namespace":
			return 0, s.str(&r.Namespace)
		case "volume_id":
			return 1, s.str(&r.VolumeID)
		case "claim":
			return 2, assign(&r.Claim, s.claim)
		case "term":
			return 3, s.uint64(&r.Term)
		case "unstaged":
			return 4, s.bool(&r.Unstaged)
		case "controller_unpublished":
			return 5, s.bool(&r.ControllerUnpublished)
		case "free":
			return 6, s.bool(&r.Free)
		}
		return 0, false // unknown here
	})
}

func (s *jsonScan) claim() (*structs.Claim, bool) {
	return object(s, func(c *structs.Claim, k []byte) (uint, bool) {
		switch string(k) {
		case "alloc_id":
			return 0, s.str(&c.AllocID)
		case "node_id":
			return 1, s.str(&c.NodeID)
		case "mode":
			return 2, s.enum((*string)(&c.Mode))
		case "access_mode":
			return 3, s.enum((*string)(&c.AccessMode))
		case "attachment_mode":
			return 4, s.enum((*string)(&c.AttachmentMode))
		case "state":
			return 5, s.enum((*string)(&c.State))
		case "external_node_id":
			return 6, s.str(&c.ExternalNodeID)
		case "publish_context":
			return 7, assign(&c.PublishContext, s.stringMap)
		case "staging_path":
			return 8, s.str(&c.StagingPath)
		case "target_path":
			return 9, s.str(&c.TargetPath)
		case "attempts":
			return 10, s.int(&c.Attempts)
		case "next_attempt":
			return 11, s.time(&c.NextAttempt)
		case "first_failure":
			return 12, s.time(&c.FirstFailure)
		case "last_error":
			return 13, assign(&c.LastError, s.claimError)
		case "skip_node_step":
			return 14, s.bool(&c.SkipNodeStep)
		case "node_unpublished":
			return 15, s.bool(&c.NodeUnpublished)
		case "fence_reason":
			return 16, s.str(&c.FenceReason)
		case "hold":
			return 17, assign(&c.Hold, s.claimHold)
		case "create_time":
			return 18, s.time(&c.CreateTime)
		case "modify_time":
			return 19, s.time(&c.ModifyTime)
		case "create_index":
			return 20, s.uint64(&c.CreateIndex)
		case "modify_index":
			return 21, s.uint64(&c.ModifyIndex)
		case "unattached":
			return 22, s.bool(&c.Unattached)
		case "restored":
			return 23, s.bool(&c.Restored)
		}
		return 0, false // unknown here
	})
}

// stringMap reads an object of plain strings. A repeated key is kept as
// encoding/json keeps it (the last value wins).
func (s *jsonScan) stringMap() (map[string]string, bool) {
	if s.Literal("null") {
		return nil, true
	}
	m := map[string]string{} // encoding/json makes {} an empty map, not nil
	ok := s.Fields(func(k []byte) bool {
		v, ok := s.Str()
		m[string(k)] = string(v)
		return ok
	})
	return m, ok
}

func (s *jsonScan) claimError() (*structs.ClaimError, bool) {
	return object(s, func(e *structs.ClaimError, k []byte) (uint, bool) {
		switch string(k) {
		case "kind":
			return 0, s.enum((*string)(&e.Kind))
		case "step":
			return 1, s.str(&e.Step)
		case "code":
			return 2, s.uint32(&e.Code)
		case "code_name":
			return 3, s.str(&e.CodeName)
		case "message":
			return 4, s.str(&e.Message)
		case "module":
			return 5, s.str(&e.Module)
		case "module_version":
			return 6, s.str(&e.ModuleVersion)
		case "fault":
			return 7, s.str(&e.Fault)
		case "fatal":
			return 8, s.bool(&e.Fatal)
		case "resent":
			return 9, s.bool(&e.Resent)
		case "time":
			return 10, s.time(&e.Time)
		}
		return 0, false // unknown here
	})
}

func (s *jsonScan) claimHold() (*structs.ClaimHold, bool) {
	return object(s, func(h *structs.ClaimHold, k []byte) (uint, bool) {
		switch string(k) {
		case "module":
			return 0, s.str(&h.Module)
		case "module_version":
			return 1, s.str(&h.ModuleVersion)
		case "reason":
			return 2, s.str(&h.Reason)
		case "since":
			return 3, s.time(&h.Since)
		case "until":
			return 4, s.time(&h.Until)
		}
		return 0, false // unknown here
	})
}
