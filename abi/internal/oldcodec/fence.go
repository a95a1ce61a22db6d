package oldcodec

// ABI 1.1: volhost_confirm_fence (ABI.md sections 2 and 10). A csi-adapter
// module that exports it may confirm that a node whose agent stopped
// heartbeating is really off (a fence), so its claims skip their node
// steps. The host only ever asks about a node that is heartbeat-lost and
// not fenced, checks the answer against what it asked and against
// committed state, and treats anything but a valid confirmation as "not
// confirmed": a module can shorten a wait for a lost node, never make the
// host detach from a node that is up (Kubernetes #120344).

import (
	"fmt"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
)

// MaxFenceReasonLength bounds FenceResponse.Reason: it becomes the fence's
// reason, shown in events, on claims and by the CLI.
const MaxFenceReasonLength = 256

// FenceRequest tells a csi-adapter what the host knows about a node it
// has lost: the node stopped heartbeating and nobody has fenced it. It is a
// pure view (ABI.md section 8): the module decides from it and its config.
type FenceRequest struct {
	NowUnixMs int64 // 1
	// Node (2): status down or gone, LastSeenAgeMs since the last
	// heartbeat, Meta, and ExternalID, the node ID its plugin reported.
	Node NodeView
	// Plugin (3) is the CSI plugin of the volume whose claims wait.
	Plugin PluginView
	// LostAgeMs (4) is how long the node has been down or gone through
	// missed heartbeats.
	LostAgeMs int64
	// StatusReason (5) is why the host set the status (missed heartbeats).
	StatusReason string
	// Volume (6) and Claims (7): a volume waiting on the node and its
	// claims there (the asking pass's, not every volume's).
	Volume VolumeView
	Claims []ClaimView
	// Attempts (8) counts the earlier answers about this loss of the node
	// (0 the first time).
	Attempts uint32
}

// FenceResponse is a csi-adapter's answer about a lost node.
type FenceResponse struct {
	// NodeID (1) must be the request's Node.ID: an answer about another
	// node is refused.
	NodeID string
	// Confirmed (2): the module attests the node is off. Without it the
	// node's claims keep waiting.
	Confirmed bool
	// Reason (3) is required when Confirmed (at most MaxFenceReasonLength
	// bytes of UTF-8); it becomes the fence's reason.
	Reason string
	// RetryAfterMs (4): ask again no sooner than this (0: the host's
	// backoff decides); clamped like a policy's.
	RetryAfterMs int64
	Error        string // 15
}

var (
	_ Message = (*FenceRequest)(nil)
	_ Message = (*FenceResponse)(nil)
)

// MarshalAppend appends the encoding of m to b.
func (m *FenceRequest) MarshalAppend(b []byte) []byte {
	b = appendVarint(b, 1, uint64(m.NowUnixMs))
	b = openNested(b, 2)
	start := len(b)
	b = closeNestedOmitEmpty(m.Node.MarshalAppend(b), start)
	b = openNested(b, 3)
	start = len(b)
	b = closeNestedOmitEmpty(m.Plugin.MarshalAppend(b), start)
	b = appendVarint(b, 4, uint64(m.LostAgeMs))
	b = appendString(b, 5, m.StatusReason)
	b = openNested(b, 6)
	start = len(b)
	b = closeNestedOmitEmpty(m.Volume.MarshalAppend(b), start)
	for i := range m.Claims {
		b = openNested(b, 7)
		start := len(b)
		b = closeNested(m.Claims[i].MarshalAppend(b), start)
	}
	return appendVarint(b, 8, uint64(m.Attempts))
}

// Unmarshal replaces m with the message encoded in b.
func (m *FenceRequest) Unmarshal(b []byte) error {
	d, err := newDecoder(b)
	var v FenceRequest
	if err == nil {
		err = v.merge(&d, d.base)
	}
	if err != nil {
		return malformed("FenceRequest", err)
	}
	*m = v
	return nil
}

// nextField reads the tag and value of the field at the front of b (the
// general loop of the other messages, without their fast paths: a fence
// request is rare, so the plain loop is enough). n is the bytes the field
// takes; for a wire type other than bytes or varint it is the tag only and
// skipField must consume the value.
func nextField(b []byte) (num protowire.Number, typ protowire.Type, v []byte, x uint64, n int, err error) {
	num, typ, n = protowire.ConsumeTag(b)
	if n < 0 {
		return 0, 0, nil, 0, 0, tagError(n)
	}
	rest := b[n:]
	var m int
	switch typ {
	case protowire.BytesType:
		if v, m = protowire.ConsumeBytes(rest); m < 0 {
			return 0, 0, nil, 0, 0, valueError(num, m)
		}
	case protowire.VarintType:
		if x, m = protowire.ConsumeVarint(rest); m < 0 {
			return 0, 0, nil, 0, 0, valueError(num, m)
		}
	}
	return num, typ, v, x, n + m, nil
}

func (m *FenceRequest) merge(d *decoder, b []byte) error {
	for len(b) > 0 {
		num, typ, v, x, n, err := nextField(b)
		if err != nil {
			return err
		}
		switch num {
		case 1:
			err = setInt64(typ, x, &m.NowUnixMs)
		case 2:
			if err = wantBytes(typ); err == nil {
				err = m.Node.merge(d, v)
			}
		case 3:
			if err = wantBytes(typ); err == nil {
				err = m.Plugin.merge(d, v)
			}
		case 4:
			err = setInt64(typ, x, &m.LostAgeMs)
		case 5:
			err = d.setString(typ, v, &m.StatusReason)
		case 6:
			if err = wantBytes(typ); err == nil {
				err = m.Volume.merge(d, v)
			}
		case 7:
			if err = checkItem(typ, len(m.Claims)); err == nil {
				m.Claims = append(m.Claims, ClaimView{})
				if err = m.Claims[len(m.Claims)-1].merge(d, v); err != nil {
					err = itemError(len(m.Claims)-1, err)
				}
			}
		case 8:
			err = setUint32(typ, x, &m.Attempts)
		default:
			if typ != protowire.BytesType && typ != protowire.VarintType {
				var k int
				k, err = skipField(num, typ, b[n:])
				n += k
			}
		}
		if err != nil {
			return fieldError(num, typ, err)
		}
		b = b[n:]
	}
	return nil
}

// MarshalAppend appends the encoding of m to b.
func (m *FenceResponse) MarshalAppend(b []byte) []byte {
	b = appendString(b, 1, m.NodeID)
	b = appendBool(b, 2, m.Confirmed)
	b = appendString(b, 3, m.Reason)
	b = appendVarint(b, 4, uint64(m.RetryAfterMs))
	return appendString(b, 15, m.Error)
}

// Unmarshal replaces m with the message encoded in b.
func (m *FenceResponse) Unmarshal(b []byte) error {
	d, err := newDecoder(b)
	var v FenceResponse
	if err == nil {
		err = v.merge(&d, d.base)
	}
	if err != nil {
		return malformed("FenceResponse", err)
	}
	*m = v
	return nil
}

func (m *FenceResponse) merge(d *decoder, b []byte) error {
	for len(b) > 0 {
		num, typ, v, x, n, err := nextField(b)
		if err != nil {
			return err
		}
		switch num {
		case 1:
			err = d.setString(typ, v, &m.NodeID)
		case 2:
			err = setBool(typ, x, &m.Confirmed)
		case 3:
			err = d.setString(typ, v, &m.Reason)
		case 4:
			err = setInt64(typ, x, &m.RetryAfterMs)
		case 15:
			err = d.setString(typ, v, &m.Error)
		default:
			if typ != protowire.BytesType && typ != protowire.VarintType {
				var k int
				k, err = skipField(num, typ, b[n:])
				n += k
			}
		}
		if err != nil {
			return fieldError(num, typ, err)
		}
		b = b[n:]
	}
	return nil
}

// FenceAnswerError says what is wrong with a decoded FenceResponse to req,
// or returns "" for a usable one (ABI.md section 7): it must name the node
// it was asked about, a confirmation needs a reason of at most
// MaxFenceReasonLength bytes of valid UTF-8, and retry_after_ms must not be
// negative. The host and the authoring tools share it.
func FenceAnswerError(req *FenceRequest, resp *FenceResponse) string {
	switch {
	case resp.NodeID != req.Node.ID:
		return fmt.Sprintf("answer names node %q, but the module was asked about node %q", resp.NodeID, req.Node.ID)
	case resp.RetryAfterMs < 0:
		return "retry_after_ms is negative"
	case !utf8.ValidString(resp.Reason):
		return "reason is not valid UTF-8"
	case len(resp.Reason) > MaxFenceReasonLength:
		return fmt.Sprintf("reason is %d bytes long, at most %d allowed", len(resp.Reason), MaxFenceReasonLength)
	case resp.Confirmed && resp.Reason == "":
		return "confirmed without a reason: a fence must say why the node is known to be off"
	}
	return ""
}
