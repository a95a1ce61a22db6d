package cluster

import (
	"math"

	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/internal/plainjson"
)

// decodeCheckpoint decodes body, the request of a ClaimCheckpointType or
// ClaimCheckpointBatchType entry, when it has the plain shape json.Marshal
// writes for a release's checkpoints: objects of known keys, each once,
// strings of ASCII, integers, booleans, RFC 3339 times and null for a nil
// pointer, map or slice; no white space (the claim's reader is
// host/structs' ReadClaimJSON). ok is
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
	s := plainjson.Scanner{B: body}
	switch t {
	case structs.ClaimCheckpointType:
		// A body of null is left to encoding/json, which leaves the
		// request it decodes into as it was (empty); checkpoint's nil
		// would reach the FSM as a nil request.
		r, ok := readCheckpoint(&s)
		if ok && r != nil && s.Done() {
			return r, true
		}
	case structs.ClaimCheckpointBatchType:
		r, ok := readBatch(&s)
		if ok && s.Done() {
			return r, true
		}
	}
	return nil, false
}

func readBatch(s *plainjson.Scanner) (*structs.ClaimCheckpointBatchRequest, bool) {
	r := &structs.ClaimCheckpointBatchRequest{}
	seen := false // its one key, once (see plainjson.Object)
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
			c, ok := readCheckpoint(s)
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

func readCheckpoint(s *plainjson.Scanner) (*structs.ClaimCheckpointRequest, bool) {
	return plainjson.Object(s, func(r *structs.ClaimCheckpointRequest, k []byte) (uint, bool) {
		var ok bool
		switch string(k) {
		case "namespace":
			return 0, s.StrTo(&r.Namespace)
		case "volume_id":
			return 1, s.StrTo(&r.VolumeID)
		case "claim":
			r.Claim, ok = structs.ReadClaimJSON(s)
			return 2, ok
		case "term":
			r.Term, ok = s.Uint(math.MaxUint64)
			return 3, ok
		case "unstaged":
			r.Unstaged, ok = s.Bool()
			return 4, ok
		case "controller_unpublished":
			r.ControllerUnpublished, ok = s.Bool()
			return 5, ok
		case "free":
			r.Free, ok = s.Bool()
			return 6, ok
		}
		return 0, false // unknown here
	})
}
