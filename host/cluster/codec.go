package cluster

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/volhost/volhost/host/structs"
)

// A command in the replicated log is one type byte followed by a JSON
// envelope carrying the leader's clock reading and the request. The time
// travels in the entry so applying it is deterministic: every replica, and
// a replay after a restart, stamps events and defaults with the same time.
// JSON round-trips every field of host/structs, time.Time included
// (RFC 3339 with nanoseconds and the zone offset).
type envelope struct {
	Time time.Time       `json:"time"`
	Req  json.RawMessage `json:"req"`
}

// newRequest returns a pointer to the request type of t. Message types are
// persisted: this table only grows.
func newRequest(t structs.MessageType) (any, error) {
	switch t {
	case structs.PluginUpsertType:
		return &structs.PluginUpsertRequest{}, nil
	case structs.NodeUpsertType:
		return &structs.NodeUpsertRequest{}, nil
	case structs.VolumeRegisterType:
		return &structs.VolumeRegisterRequest{}, nil
	case structs.VolumeDeregisterType:
		return &structs.VolumeDeregisterRequest{}, nil
	case structs.AllocUpsertType:
		return &structs.AllocUpsertRequest{}, nil
	case structs.VolumeClaimType:
		return &structs.VolumeClaimRequest{}, nil
	case structs.ClaimCheckpointType:
		return &structs.ClaimCheckpointRequest{}, nil
	case structs.VolumeStuckType:
		return &structs.VolumeStuckRequest{}, nil
	case structs.ClaimGCType:
		return &structs.ClaimGCRequest{}, nil
	case structs.LeftoversClearType:
		return &structs.LeftoversClearRequest{}, nil
	case structs.EventAppendType:
		return &structs.EventAppendRequest{}, nil
	case structs.NodeStatusUpdateType:
		return &structs.NodeStatusUpdateRequest{}, nil
	case structs.PluginDeregisterType:
		return &structs.PluginDeregisterRequest{}, nil
	case structs.NodeDeregisterType:
		return &structs.NodeDeregisterRequest{}, nil
	case structs.AllocDeleteType:
		return &structs.AllocDeleteRequest{}, nil
	case structs.VolumeClaimRemoveType:
		return &structs.VolumeClaimRemoveRequest{}, nil
	case structs.NodeFenceType:
		return &structs.NodeFenceRequest{}, nil
	case structs.NodeLivenessType:
		return &structs.NodeLivenessRequest{}, nil
	case structs.ClaimCheckpointBatchType:
		return &structs.ClaimCheckpointBatchRequest{}, nil
	case structs.SchedulerSyncType:
		return &structs.SchedulerSyncRequest{}, nil
	}
	if r := structs.NewACLRequest(t); r != nil {
		return r, nil
	}
	return nil, structs.Invalid("type", "unknown message type %d", t)
}

// encodeCommand renders a log entry. The envelope is written around the
// request's encoding rather than marshalled: json.Marshal of the envelope
// would scan and copy the request's bytes again (json.RawMessage is
// compacted) to produce the same bytes (TestEncodeCommandEnvelope), once
// per log entry on the release path (BenchmarkEncodeCheckpoint). A checkpoint's request is
// written by appendCheckpoint when it can (checkpoint_json.go), and the
// entry is built in a pooled buffer and copied out at its size, as
// json.Marshal does with its own: a buffer per entry grown by appending
// allocated more than json.Marshal had.
func encodeCommand(t structs.MessageType, now time.Time, req any) ([]byte, error) {
	scratch := entryBuffers.Get().(*[]byte)
	defer entryBuffers.Put(scratch)
	// The time as time.Time.MarshalJSON writes it (both use its strict
	// RFC 3339 form), into the entry rather than a buffer of its own.
	b := append(append((*scratch)[:0], byte(t)), `{"time":"`...)
	b, err := now.UTC().AppendText(b)
	if err != nil {
		return nil, fmt.Errorf("encode %d envelope: %w", t, err)
	}
	b = append(b, `","req":`...)
	if withReq, ok := appendCheckpoint(b, req); ok {
		b = withReq
	} else {
		body, err := json.Marshal(req)
		if err != nil {
			return nil, fmt.Errorf("encode %d request: %w", t, err)
		}
		b = append(b, body...)
	}
	b = append(b, '}')
	*scratch = b
	return bytes.Clone(b), nil
}

// entryBuffers are encodeCommand's scratch buffers.
var entryBuffers = sync.Pool{New: func() any { return new([]byte) }}

// decodeCommand parses a log entry.
func decodeCommand(data []byte) (structs.MessageType, time.Time, any, error) {
	if len(data) < 2 {
		return 0, time.Time{}, nil, fmt.Errorf("command of %d bytes is too short", len(data))
	}
	t := structs.MessageType(data[0])
	if at, body, ok := splitEnvelope(data[1:]); ok {
		var when time.Time
		if when.UnmarshalJSON(at) == nil {
			// A checkpoint of the plain shape needs no request from
			// newRequest: decodeCheckpoint makes its own.
			if fast, ok := decodeCheckpoint(t, body); ok {
				return t, when, fast, nil
			}
			req, err := newRequest(t)
			if err != nil {
				return t, time.Time{}, nil, err
			}
			if json.Unmarshal(body, req) == nil {
				return t, when, req, nil
			}
		}
		// Anything the split decodes, the envelope decodes the same;
		// anything it does not is left to the envelope's decoding, whose
		// errors say what is wrong, into a fresh request.
	}
	req, err := newRequest(t)
	if err != nil {
		return t, time.Time{}, nil, err
	}
	var env envelope
	if err := json.Unmarshal(data[1:], &env); err != nil {
		return t, time.Time{}, nil, fmt.Errorf("decode %d envelope: %w", t, err)
	}
	if err := json.Unmarshal(env.Req, req); err != nil {
		return t, time.Time{}, nil, fmt.Errorf("decode %d request: %w", t, err)
	}
	return t, env.Time, req, nil
}

// splitEnvelope finds the time and the request in an envelope of exactly
// the shape encodeCommand writes (and json.Marshal of envelope wrote
// before it): {"time":"<RFC 3339>","req":<request>}. Decoding the
// envelope as JSON scanned the whole request once more and copied it
// into the json.RawMessage before the request's own decoding, on every
// entry every server applies (BenchmarkDecodeCheckpoint). The time string of that shape
// holds no quote or backslash, so its end is the next quote. The request
// is what lies between the time and the envelope's last byte; the
// caller's json.Unmarshal of it refuses anything that is not one JSON
// value (a second key after the request, for one). Any other shape
// (whitespace, other key order, escapes) answers false and is decoded as
// an envelope.
func splitEnvelope(b []byte) (at, req []byte, ok bool) {
	const open, mid = `{"time":"`, `,"req":`
	if !bytes.HasPrefix(b, []byte(open)) || b[len(b)-1] != '}' {
		return nil, nil, false
	}
	end := bytes.IndexByte(b[len(open):], '"')
	if end < 0 {
		return nil, nil, false
	}
	at = b[len(open)-1 : len(open)+end+1] // with its quotes
	if bytes.IndexByte(at, '\\') >= 0 {
		return nil, nil, false
	}
	rest := b[len(open)+end+1:]
	if !bytes.HasPrefix(rest, []byte(mid)) || len(rest) < len(mid)+1 {
		return nil, nil, false
	}
	return at, rest[len(mid) : len(rest)-1], true
}
