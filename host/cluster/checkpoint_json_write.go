package cluster

import (
	"slices"
	"strconv"
	"time"

	"github.com/volhost/volhost/host/structs"
)

// appendCheckpoint appends json.Marshal of a checkpoint request to b,
// byte for byte, when every string in it is plain (printable ASCII that
// json.Marshal writes as it is: no quote, backslash or HTML character it
// escapes) and every time one it can write; ok is false for anything else
// (what it appended is then to be dropped), which the caller marshals with
// encoding/json. The leader encodes every checkpoint it appends (by
// reflection a large part of a release's CPU: BenchmarkEncodeCheckpoint);
// TestEncodeCheckpointMatchesJSON and FuzzEncodeCheckpoint compare the
// bytes with json.Marshal's.
func appendCheckpoint(b []byte, req any) (out []byte, ok bool) {
	e := jsonWriter{b: b}
	switch r := req.(type) {
	case *structs.ClaimCheckpointRequest:
		e.checkpoint(r)
	case *structs.ClaimCheckpointBatchRequest:
		e.open()
		e.key("checkpoints")
		if r.Checkpoints == nil {
			e.raw("null")
		} else {
			e.raw("[")
			for i, c := range r.Checkpoints {
				if i > 0 {
					e.raw(",")
				}
				e.checkpoint(c)
			}
			e.raw("]")
		}
		e.close()
	default:
		return nil, false
	}
	return e.b, !e.refused
}

// jsonWriter appends JSON as json.Marshal writes it; refused records a
// value it does not write the same. first is true between an object's
// brace and its first key, so key knows whether a comma goes before it
// (omitempty fields leave any of them first).
type jsonWriter struct {
	b       []byte
	refused bool
	first   bool
}

func (e *jsonWriter) raw(s string) { e.b = append(e.b, s...) }

// open starts an object and close ends it.
func (e *jsonWriter) open()  { e.b, e.first = append(e.b, '{'), true }
func (e *jsonWriter) close() { e.b, e.first = append(e.b, '}'), false }

// key writes "key": after a comma, unless it is its object's first.
func (e *jsonWriter) key(k string) {
	if !e.first {
		e.b = append(e.b, ',')
	}
	e.first = false
	e.b = append(e.b, '"')
	e.b = append(e.b, k...)
	e.b = append(e.b, '"', ':')
}

// str writes a plain string; any other is refused (json.Marshal escapes
// a quote, a backslash, control characters, <, > and &, and checks the
// UTF-8 of the rest).
func (e *jsonWriter) str(s string) {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			e.refused = true
			return
		}
	}
	e.b = append(e.b, '"')
	e.b = append(e.b, s...)
	e.b = append(e.b, '"')
}

// time writes what time.Time.MarshalJSON does (both write the time's
// strict RFC 3339 form, quoted here), without its buffer per time.
func (e *jsonWriter) time(t time.Time) {
	b, err := t.AppendText(append(e.b, '"'))
	if err != nil {
		e.refused = true // json.Marshal reports it
		return
	}
	e.b = append(b, '"')
}

func (e *jsonWriter) uint(x uint64) { e.b = strconv.AppendUint(e.b, x, 10) }
func (e *jsonWriter) int(x int64)   { e.b = strconv.AppendInt(e.b, x, 10) }

// flag writes "key":true for an omitempty boolean that is set.
func (e *jsonWriter) flag(k string, v bool) {
	if v {
		e.key(k)
		e.raw("true")
	}
}

// field writes "key":"v" for a string field json.Marshal always writes.
func (e *jsonWriter) field(k, v string) {
	e.key(k)
	e.str(v)
}

// optional writes an omitempty string that is set.
func (e *jsonWriter) optional(k, v string) {
	if v != "" {
		e.field(k, v)
	}
}

func (e *jsonWriter) checkpoint(r *structs.ClaimCheckpointRequest) {
	if r == nil {
		e.raw("null")
		return
	}
	e.open()
	e.field("namespace", r.Namespace)
	e.field("volume_id", r.VolumeID)
	e.key("claim")
	e.claim(r.Claim)
	if r.Term != 0 {
		e.key("term")
		e.uint(r.Term)
	}
	e.flag("unstaged", r.Unstaged)
	e.flag("controller_unpublished", r.ControllerUnpublished)
	e.flag("free", r.Free)
	e.close()
}

func (e *jsonWriter) claim(c *structs.Claim) {
	if c == nil {
		e.raw("null")
		return
	}
	e.open()
	e.field("alloc_id", c.AllocID)
	e.field("node_id", c.NodeID)
	e.field("mode", string(c.Mode))
	e.field("access_mode", string(c.AccessMode))
	e.field("attachment_mode", string(c.AttachmentMode))
	e.field("state", string(c.State))
	e.optional("external_node_id", c.ExternalNodeID)
	if len(c.PublishContext) > 0 {
		e.key("publish_context")
		keys := make([]string, 0, len(c.PublishContext))
		for k := range c.PublishContext {
			keys = append(keys, k)
		}
		slices.Sort(keys) // json.Marshal sorts a map's keys
		for i, k := range keys {
			if i == 0 {
				e.raw("{")
			} else {
				e.raw(",")
			}
			e.str(k)
			e.raw(":")
			e.str(c.PublishContext[k])
		}
		e.raw("}")
	}
	e.optional("staging_path", c.StagingPath)
	e.optional("target_path", c.TargetPath)
	e.flag("unattached", c.Unattached)
	e.flag("restored", c.Restored)
	e.key("attempts")
	e.int(int64(c.Attempts))
	// time.Time is a struct: omitempty never omits it.
	e.key("next_attempt")
	e.time(c.NextAttempt)
	e.key("first_failure")
	e.time(c.FirstFailure)
	if c.LastError != nil {
		e.key("last_error")
		e.claimError(c.LastError)
	}
	e.flag("skip_node_step", c.SkipNodeStep)
	e.flag("node_unpublished", c.NodeUnpublished)
	e.optional("fence_reason", c.FenceReason)
	if c.Hold != nil {
		e.key("hold")
		e.claimHold(c.Hold)
	}
	e.key("create_time")
	e.time(c.CreateTime)
	e.key("modify_time")
	e.time(c.ModifyTime)
	e.key("create_index")
	e.uint(c.CreateIndex)
	e.key("modify_index")
	e.uint(c.ModifyIndex)
	e.close()
}

func (e *jsonWriter) claimError(x *structs.ClaimError) {
	e.open()
	e.field("kind", string(x.Kind))
	e.optional("step", x.Step)
	e.key("code")
	e.uint(uint64(x.Code))
	e.optional("code_name", x.CodeName)
	e.field("message", x.Message)
	e.optional("module", x.Module)
	e.optional("module_version", x.ModuleVersion)
	e.optional("fault", x.Fault)
	e.flag("fatal", x.Fatal)
	e.flag("resent", x.Resent)
	e.key("time")
	e.time(x.Time)
	e.close()
}

func (e *jsonWriter) claimHold(h *structs.ClaimHold) {
	e.open()
	e.optional("module", h.Module)
	e.optional("module_version", h.ModuleVersion)
	e.optional("reason", h.Reason)
	e.key("since")
	e.time(h.Since)
	e.key("until")
	e.time(h.Until)
	e.close()
}
