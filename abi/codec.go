package abi

// Hand-written protobuf wire codec for the messages in messages.go, over
// protowire only: no reflection and no generated code, so a Go guest that
// links it stays small (ABI.md "Wire messages"). Encoding is deterministic
// (fields in number order, zero scalars and empty messages omitted, map
// entries sorted by key) so equal messages encode to equal bytes.
//
// Decoding follows proto3 merge rules (a repeated singular field overwrites,
// repeated and map fields accumulate), skips unknown fields so an older peer
// reads a newer message, and rejects malformed or oversized input with an
// error wrapping ErrMalformed; it never panics on any input.

import (
	"errors"
	"fmt"
	"slices"

	"google.golang.org/protobuf/encoding/protowire"
)

// Decoding limits. The host decodes guest output, so a guest must not be able
// to make the host allocate without bound.
const (
	// MaxMessageSize is the largest encoded message either side accepts.
	MaxMessageSize = 4 << 20
	// MaxRepeated is the most items a repeated or map field may hold.
	MaxRepeated = 10000
)

// ErrMalformed is wrapped by every decoding error: bad wire format, a field
// with the wrong wire type, or a message over the limits above.
var ErrMalformed = errors.New("abi: malformed message")

// Message is implemented by every wire message.
type Message interface {
	// MarshalAppend appends the message's encoding to b and returns the result.
	MarshalAppend(b []byte) []byte
	// Unmarshal replaces the message with the one encoded in b; on error
	// (wrapping ErrMalformed) the message is left untouched.
	Unmarshal(b []byte) error
}

// Compile-time check that every message implements Message.
var (
	_ Message = (*ConfigureRequest)(nil)
	_ Message = (*ConfigureResponse)(nil)
	_ Message = (*VolumeView)(nil)
	_ Message = (*ClaimView)(nil)
	_ Message = (*AllocView)(nil)
	_ Message = (*NodeView)(nil)
	_ Message = (*PolicyRequest)(nil)
	_ Message = (*Decision)(nil)
	_ Message = (*PolicyResponse)(nil)
	_ Message = (*PluginView)(nil)
	_ Message = (*AdapterRequest)(nil)
	_ Message = (*AdapterResponse)(nil)
	_ Message = (*ClassifyRequest)(nil)
	_ Message = (*ClassifyResponse)(nil)
)

// ---- encoding helpers ----

func appendString(b []byte, num protowire.Number, v string) []byte {
	if v == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, v)
}

func appendVarint(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

func appendBool(b []byte, num protowire.Number, v bool) []byte {
	if !v {
		return b
	}
	return appendVarint(b, num, 1)
}

// appendNested appends field num holding the message enc writes. It reserves
// one length byte and moves the body when the length needs more, which
// avoids a separate size pass or a temporary buffer. With omitEmpty an empty
// body drops the whole field (proto3: absent equals default).
func appendNested(b []byte, num protowire.Number, omitEmpty bool, enc func([]byte) []byte) []byte {
	start := len(b)
	b = protowire.AppendTag(b, num, protowire.BytesType)
	lenPos := len(b)
	b = append(b, 0)
	b = enc(b)
	n := len(b) - lenPos - 1
	if n == 0 && omitEmpty {
		return b[:start]
	}
	if n < 0x80 {
		b[lenPos] = byte(n)
		return b
	}
	sz := protowire.SizeVarint(uint64(n))
	b = append(b, make([]byte, sz-1)...)
	copy(b[lenPos+sz:], b[lenPos+1:lenPos+1+n])
	protowire.AppendVarint(b[lenPos:lenPos], uint64(n))
	return b
}

// appendMap encodes a map<string,string> as repeated entries {1: key, 2: value}
// sorted by key.
func appendMap(b []byte, num protowire.Number, m map[string]string) []byte {
	if len(m) == 0 {
		return b
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		v := m[k]
		b = appendNested(b, num, false, func(b []byte) []byte {
			b = appendString(b, 1, k)
			return appendString(b, 2, v)
		})
	}
	return b
}

// ---- decoding helpers ----

// walk calls field for every field of the message in b. field returns the
// number of bytes of b (the value, after the tag) it consumed, or -1 when
// the field is unknown, which walk then skips.
func walk(b []byte, field func(num protowire.Number, typ protowire.Type, b []byte) (int, error)) error {
	if len(b) > MaxMessageSize {
		return fmt.Errorf("%d bytes exceeds the %d byte limit", len(b), MaxMessageSize)
	}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("tag: %w", protowire.ParseError(n))
		}
		b = b[n:]
		m, err := field(num, typ, b)
		if err != nil {
			return fmt.Errorf("field %d: %w", num, err)
		}
		if m < 0 {
			m = protowire.ConsumeFieldValue(num, typ, b)
			if m < 0 {
				return fmt.Errorf("unknown field %d: %w", num, protowire.ParseError(m))
			}
		}
		b = b[m:]
	}
	return nil
}

func wantType(got, want protowire.Type) error {
	if got != want {
		return fmt.Errorf("wire type %d, want %d", got, want)
	}
	return nil
}

func consumeString(typ protowire.Type, b []byte, dst *string) (int, error) {
	if err := wantType(typ, protowire.BytesType); err != nil {
		return 0, err
	}
	v, n := protowire.ConsumeString(b)
	if n < 0 {
		return 0, protowire.ParseError(n)
	}
	*dst = v
	return n, nil
}

func consumeVarint(typ protowire.Type, b []byte) (uint64, int, error) {
	if err := wantType(typ, protowire.VarintType); err != nil {
		return 0, 0, err
	}
	v, n := protowire.ConsumeVarint(b)
	if n < 0 {
		return 0, 0, protowire.ParseError(n)
	}
	return v, n, nil
}

func consumeUint32(typ protowire.Type, b []byte, dst *uint32) (int, error) {
	v, n, err := consumeVarint(typ, b)
	*dst = uint32(v) // proto3 uint32/enum semantics: truncate to 32 bits
	return n, err
}

func consumeInt64(typ protowire.Type, b []byte, dst *int64) (int, error) {
	v, n, err := consumeVarint(typ, b)
	*dst = int64(v)
	return n, err
}

func consumeBool(typ protowire.Type, b []byte, dst *bool) (int, error) {
	v, n, err := consumeVarint(typ, b)
	*dst = v != 0
	return n, err
}

// consumeMessage decodes a length-delimited nested message with dec.
func consumeMessage(typ protowire.Type, b []byte, dec func([]byte) error) (int, error) {
	if err := wantType(typ, protowire.BytesType); err != nil {
		return 0, err
	}
	v, n := protowire.ConsumeBytes(b)
	if n < 0 {
		return 0, protowire.ParseError(n)
	}
	return n, dec(v)
}

// consumeRepeated appends one decoded element to *s, enforcing MaxRepeated.
func consumeRepeated[T any](typ protowire.Type, b []byte, s *[]T, dec func(*T, []byte) error) (int, error) {
	if len(*s) >= MaxRepeated {
		return 0, fmt.Errorf("more than %d items", MaxRepeated)
	}
	var v T
	n, err := consumeMessage(typ, b, func(b []byte) error { return dec(&v, b) })
	if err != nil {
		return 0, fmt.Errorf("item %d: %w", len(*s), err)
	}
	*s = append(*s, v)
	return n, nil
}

// consumeMapEntry decodes one map<string,string> entry into *m.
func consumeMapEntry(typ protowire.Type, b []byte, m *map[string]string) (int, error) {
	if len(*m) >= MaxRepeated {
		return 0, fmt.Errorf("more than %d entries", MaxRepeated)
	}
	var k, v string
	n, err := consumeMessage(typ, b, func(b []byte) error {
		return walk(b, func(num protowire.Number, typ protowire.Type, b []byte) (int, error) {
			switch num {
			case 1:
				return consumeString(typ, b, &k)
			case 2:
				return consumeString(typ, b, &v)
			}
			return -1, nil
		})
	})
	if err != nil {
		return 0, fmt.Errorf("map entry: %w", err)
	}
	if *m == nil {
		*m = make(map[string]string)
	}
	(*m)[k] = v
	return n, nil
}

// unmarshal decodes b into a fresh T with dec and replaces *m only on
// success, so a failed decode leaves *m untouched. Its error names the
// message and wraps ErrMalformed.
func unmarshal[T any](name string, m *T, b []byte, dec func(*T, []byte) error) error {
	var v T
	if err := dec(&v, b); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrMalformed, name, err)
	}
	*m = v
	return nil
}

// ---- ConfigureRequest ----

// MarshalAppend appends the encoding of m to b.
func (m *ConfigureRequest) MarshalAppend(b []byte) []byte {
	b = appendString(b, 1, m.ModuleName)
	return appendMap(b, 2, m.Config)
}

// Unmarshal replaces m with the message encoded in b.
func (m *ConfigureRequest) Unmarshal(b []byte) error {
	return unmarshal("ConfigureRequest", m, b, (*ConfigureRequest).merge)
}

func (m *ConfigureRequest) merge(b []byte) error {
	return walk(b, func(num protowire.Number, typ protowire.Type, b []byte) (int, error) {
		switch num {
		case 1:
			return consumeString(typ, b, &m.ModuleName)
		case 2:
			return consumeMapEntry(typ, b, &m.Config)
		}
		return -1, nil
	})
}

// ---- ConfigureResponse ----

// MarshalAppend appends the encoding of m to b.
func (m *ConfigureResponse) MarshalAppend(b []byte) []byte {
	b = appendString(b, 1, m.Version)
	return appendString(b, 15, m.Error)
}

// Unmarshal replaces m with the message encoded in b.
func (m *ConfigureResponse) Unmarshal(b []byte) error {
	return unmarshal("ConfigureResponse", m, b, (*ConfigureResponse).merge)
}

func (m *ConfigureResponse) merge(b []byte) error {
	return walk(b, func(num protowire.Number, typ protowire.Type, b []byte) (int, error) {
		switch num {
		case 1:
			return consumeString(typ, b, &m.Version)
		case 15:
			return consumeString(typ, b, &m.Error)
		}
		return -1, nil
	})
}

// ---- VolumeView ----

// MarshalAppend appends the encoding of m to b.
func (m *VolumeView) MarshalAppend(b []byte) []byte {
	b = appendString(b, 1, m.Namespace)
	b = appendString(b, 2, m.ID)
	b = appendString(b, 3, m.PluginID)
	b = appendString(b, 4, m.AccessMode)
	b = appendString(b, 5, m.AttachmentMode)
	b = appendString(b, 6, m.ExternalID)
	return appendMap(b, 7, m.Context)
}

// Unmarshal replaces m with the message encoded in b.
func (m *VolumeView) Unmarshal(b []byte) error {
	return unmarshal("VolumeView", m, b, (*VolumeView).merge)
}

func (m *VolumeView) merge(b []byte) error {
	return walk(b, func(num protowire.Number, typ protowire.Type, b []byte) (int, error) {
		switch num {
		case 1:
			return consumeString(typ, b, &m.Namespace)
		case 2:
			return consumeString(typ, b, &m.ID)
		case 3:
			return consumeString(typ, b, &m.PluginID)
		case 4:
			return consumeString(typ, b, &m.AccessMode)
		case 5:
			return consumeString(typ, b, &m.AttachmentMode)
		case 6:
			return consumeString(typ, b, &m.ExternalID)
		case 7:
			return consumeMapEntry(typ, b, &m.Context)
		}
		return -1, nil
	})
}

// ---- ClaimView ----

// MarshalAppend appends the encoding of m to b.
func (m *ClaimView) MarshalAppend(b []byte) []byte {
	b = appendString(b, 1, m.AllocID)
	b = appendString(b, 2, m.NodeID)
	b = appendString(b, 3, m.Mode)
	b = appendString(b, 4, m.State)
	b = appendVarint(b, 5, uint64(m.Attempts))
	b = appendVarint(b, 6, uint64(m.LastErrorCode))
	b = appendString(b, 7, m.LastErrorKind)
	b = appendString(b, 8, m.ExternalNodeID)
	b = appendString(b, 9, m.AccessMode)
	return appendString(b, 10, m.AttachmentMode)
}

// Unmarshal replaces m with the message encoded in b.
func (m *ClaimView) Unmarshal(b []byte) error {
	return unmarshal("ClaimView", m, b, (*ClaimView).merge)
}

func (m *ClaimView) merge(b []byte) error {
	return walk(b, func(num protowire.Number, typ protowire.Type, b []byte) (int, error) {
		switch num {
		case 1:
			return consumeString(typ, b, &m.AllocID)
		case 2:
			return consumeString(typ, b, &m.NodeID)
		case 3:
			return consumeString(typ, b, &m.Mode)
		case 4:
			return consumeString(typ, b, &m.State)
		case 5:
			return consumeUint32(typ, b, &m.Attempts)
		case 6:
			return consumeUint32(typ, b, &m.LastErrorCode)
		case 7:
			return consumeString(typ, b, &m.LastErrorKind)
		case 8:
			return consumeString(typ, b, &m.ExternalNodeID)
		case 9:
			return consumeString(typ, b, &m.AccessMode)
		case 10:
			return consumeString(typ, b, &m.AttachmentMode)
		}
		return -1, nil
	})
}

// ---- AllocView ----

// MarshalAppend appends the encoding of m to b.
func (m *AllocView) MarshalAppend(b []byte) []byte {
	b = appendString(b, 1, m.ID)
	b = appendString(b, 2, m.ClientStatus)
	return appendVarint(b, 3, uint64(m.TerminalAgeMs))
}

// Unmarshal replaces m with the message encoded in b.
func (m *AllocView) Unmarshal(b []byte) error {
	return unmarshal("AllocView", m, b, (*AllocView).merge)
}

func (m *AllocView) merge(b []byte) error {
	return walk(b, func(num protowire.Number, typ protowire.Type, b []byte) (int, error) {
		switch num {
		case 1:
			return consumeString(typ, b, &m.ID)
		case 2:
			return consumeString(typ, b, &m.ClientStatus)
		case 3:
			return consumeInt64(typ, b, &m.TerminalAgeMs)
		}
		return -1, nil
	})
}

// ---- NodeView ----

// MarshalAppend appends the encoding of m to b.
func (m *NodeView) MarshalAppend(b []byte) []byte {
	b = appendString(b, 1, m.ID)
	b = appendString(b, 2, m.Status)
	b = appendVarint(b, 3, uint64(m.LastSeenAgeMs))
	b = appendMap(b, 4, m.Meta)
	return appendString(b, 5, m.ExternalID)
}

// Unmarshal replaces m with the message encoded in b.
func (m *NodeView) Unmarshal(b []byte) error {
	return unmarshal("NodeView", m, b, (*NodeView).merge)
}

func (m *NodeView) merge(b []byte) error {
	return walk(b, func(num protowire.Number, typ protowire.Type, b []byte) (int, error) {
		switch num {
		case 1:
			return consumeString(typ, b, &m.ID)
		case 2:
			return consumeString(typ, b, &m.Status)
		case 3:
			return consumeInt64(typ, b, &m.LastSeenAgeMs)
		case 4:
			return consumeMapEntry(typ, b, &m.Meta)
		case 5:
			return consumeString(typ, b, &m.ExternalID)
		}
		return -1, nil
	})
}

// ---- PolicyRequest ----

// MarshalAppend appends the encoding of m to b.
func (m *PolicyRequest) MarshalAppend(b []byte) []byte {
	b = appendVarint(b, 1, uint64(m.NowUnixMs))
	b = appendNested(b, 2, true, m.Volume.MarshalAppend)
	for i := range m.Claims {
		b = appendNested(b, 3, false, m.Claims[i].MarshalAppend)
	}
	for i := range m.Allocs {
		b = appendNested(b, 4, false, m.Allocs[i].MarshalAppend)
	}
	for i := range m.Nodes {
		b = appendNested(b, 5, false, m.Nodes[i].MarshalAppend)
	}
	return b
}

// Unmarshal replaces m with the message encoded in b.
func (m *PolicyRequest) Unmarshal(b []byte) error {
	return unmarshal("PolicyRequest", m, b, (*PolicyRequest).merge)
}

func (m *PolicyRequest) merge(b []byte) error {
	return walk(b, func(num protowire.Number, typ protowire.Type, b []byte) (int, error) {
		switch num {
		case 1:
			return consumeInt64(typ, b, &m.NowUnixMs)
		case 2:
			return consumeMessage(typ, b, m.Volume.merge)
		case 3:
			return consumeRepeated(typ, b, &m.Claims, (*ClaimView).merge)
		case 4:
			return consumeRepeated(typ, b, &m.Allocs, (*AllocView).merge)
		case 5:
			return consumeRepeated(typ, b, &m.Nodes, (*NodeView).merge)
		}
		return -1, nil
	})
}

// ---- Decision ----

// MarshalAppend appends the encoding of m to b.
func (m *Decision) MarshalAppend(b []byte) []byte {
	b = appendString(b, 1, m.AllocID)
	b = appendVarint(b, 2, uint64(m.Action))
	b = appendVarint(b, 3, uint64(m.RetryAfterMs))
	return appendString(b, 4, m.Reason)
}

// Unmarshal replaces m with the message encoded in b.
func (m *Decision) Unmarshal(b []byte) error {
	return unmarshal("Decision", m, b, (*Decision).merge)
}

func (m *Decision) merge(b []byte) error {
	return walk(b, func(num protowire.Number, typ protowire.Type, b []byte) (int, error) {
		switch num {
		case 1:
			return consumeString(typ, b, &m.AllocID)
		case 2:
			return consumeUint32(typ, b, (*uint32)(&m.Action))
		case 3:
			return consumeInt64(typ, b, &m.RetryAfterMs)
		case 4:
			return consumeString(typ, b, &m.Reason)
		}
		return -1, nil
	})
}

// ---- PolicyResponse ----

// MarshalAppend appends the encoding of m to b.
func (m *PolicyResponse) MarshalAppend(b []byte) []byte {
	for i := range m.Decisions {
		b = appendNested(b, 1, false, m.Decisions[i].MarshalAppend)
	}
	return appendString(b, 15, m.Error)
}

// Unmarshal replaces m with the message encoded in b.
func (m *PolicyResponse) Unmarshal(b []byte) error {
	return unmarshal("PolicyResponse", m, b, (*PolicyResponse).merge)
}

func (m *PolicyResponse) merge(b []byte) error {
	return walk(b, func(num protowire.Number, typ protowire.Type, b []byte) (int, error) {
		switch num {
		case 1:
			return consumeRepeated(typ, b, &m.Decisions, (*Decision).merge)
		case 15:
			return consumeString(typ, b, &m.Error)
		}
		return -1, nil
	})
}

// ---- PluginView ----

// MarshalAppend appends the encoding of m to b.
func (m *PluginView) MarshalAppend(b []byte) []byte {
	b = appendString(b, 1, m.ID)
	b = appendString(b, 2, m.Provider)
	b = appendBool(b, 3, m.PublishUnpublish)
	return appendBool(b, 4, m.StageUnstage)
}

// Unmarshal replaces m with the message encoded in b.
func (m *PluginView) Unmarshal(b []byte) error {
	return unmarshal("PluginView", m, b, (*PluginView).merge)
}

func (m *PluginView) merge(b []byte) error {
	return walk(b, func(num protowire.Number, typ protowire.Type, b []byte) (int, error) {
		switch num {
		case 1:
			return consumeString(typ, b, &m.ID)
		case 2:
			return consumeString(typ, b, &m.Provider)
		case 3:
			return consumeBool(typ, b, &m.PublishUnpublish)
		case 4:
			return consumeBool(typ, b, &m.StageUnstage)
		}
		return -1, nil
	})
}

// ---- AdapterRequest ----

// MarshalAppend appends the encoding of m to b.
func (m *AdapterRequest) MarshalAppend(b []byte) []byte {
	b = appendString(b, 1, m.Step)
	b = appendNested(b, 2, true, m.Claim.MarshalAppend)
	b = appendNested(b, 3, true, m.Volume.MarshalAppend)
	b = appendNested(b, 4, true, m.Node.MarshalAppend)
	b = appendNested(b, 5, true, m.Plugin.MarshalAppend)
	return appendVarint(b, 6, uint64(m.NowUnixMs))
}

// Unmarshal replaces m with the message encoded in b.
func (m *AdapterRequest) Unmarshal(b []byte) error {
	return unmarshal("AdapterRequest", m, b, (*AdapterRequest).merge)
}

func (m *AdapterRequest) merge(b []byte) error {
	return walk(b, func(num protowire.Number, typ protowire.Type, b []byte) (int, error) {
		switch num {
		case 1:
			return consumeString(typ, b, &m.Step)
		case 2:
			return consumeMessage(typ, b, m.Claim.merge)
		case 3:
			return consumeMessage(typ, b, m.Volume.merge)
		case 4:
			return consumeMessage(typ, b, m.Node.merge)
		case 5:
			return consumeMessage(typ, b, m.Plugin.merge)
		case 6:
			return consumeInt64(typ, b, &m.NowUnixMs)
		}
		return -1, nil
	})
}

// ---- AdapterResponse ----

// MarshalAppend appends the encoding of m to b.
func (m *AdapterResponse) MarshalAppend(b []byte) []byte {
	b = appendString(b, 1, m.VolumeID)
	b = appendString(b, 2, m.NodeID)
	for _, k := range m.SecretKeys {
		// Repeated strings keep empty items: their count is part of the value.
		b = protowire.AppendTag(b, 3, protowire.BytesType)
		b = protowire.AppendString(b, k)
	}
	b = appendMap(b, 4, m.VolumeContext)
	return appendString(b, 15, m.Error)
}

// Unmarshal replaces m with the message encoded in b.
func (m *AdapterResponse) Unmarshal(b []byte) error {
	return unmarshal("AdapterResponse", m, b, (*AdapterResponse).merge)
}

func (m *AdapterResponse) merge(b []byte) error {
	return walk(b, func(num protowire.Number, typ protowire.Type, b []byte) (int, error) {
		switch num {
		case 1:
			return consumeString(typ, b, &m.VolumeID)
		case 2:
			return consumeString(typ, b, &m.NodeID)
		case 3:
			if len(m.SecretKeys) >= MaxRepeated {
				return 0, fmt.Errorf("more than %d items", MaxRepeated)
			}
			var s string
			n, err := consumeString(typ, b, &s)
			if err != nil {
				return 0, err
			}
			m.SecretKeys = append(m.SecretKeys, s)
			return n, nil
		case 4:
			return consumeMapEntry(typ, b, &m.VolumeContext)
		case 15:
			return consumeString(typ, b, &m.Error)
		}
		return -1, nil
	})
}

// ---- ClassifyRequest ----

// MarshalAppend appends the encoding of m to b.
func (m *ClassifyRequest) MarshalAppend(b []byte) []byte {
	b = appendString(b, 1, m.Step)
	b = appendVarint(b, 2, uint64(m.Code))
	b = appendString(b, 3, m.Message)
	b = appendVarint(b, 4, uint64(m.Attempts))
	b = appendString(b, 5, m.PluginID)
	return appendString(b, 6, m.VolumeID)
}

// Unmarshal replaces m with the message encoded in b.
func (m *ClassifyRequest) Unmarshal(b []byte) error {
	return unmarshal("ClassifyRequest", m, b, (*ClassifyRequest).merge)
}

func (m *ClassifyRequest) merge(b []byte) error {
	return walk(b, func(num protowire.Number, typ protowire.Type, b []byte) (int, error) {
		switch num {
		case 1:
			return consumeString(typ, b, &m.Step)
		case 2:
			return consumeUint32(typ, b, &m.Code)
		case 3:
			return consumeString(typ, b, &m.Message)
		case 4:
			return consumeUint32(typ, b, &m.Attempts)
		case 5:
			return consumeString(typ, b, &m.PluginID)
		case 6:
			return consumeString(typ, b, &m.VolumeID)
		}
		return -1, nil
	})
}

// ---- ClassifyResponse ----

// MarshalAppend appends the encoding of m to b.
func (m *ClassifyResponse) MarshalAppend(b []byte) []byte {
	b = appendVarint(b, 1, uint64(m.Outcome))
	b = appendVarint(b, 2, uint64(m.RetryAfterMs))
	b = appendString(b, 3, m.Reason)
	return appendString(b, 15, m.Error)
}

// Unmarshal replaces m with the message encoded in b.
func (m *ClassifyResponse) Unmarshal(b []byte) error {
	return unmarshal("ClassifyResponse", m, b, (*ClassifyResponse).merge)
}

func (m *ClassifyResponse) merge(b []byte) error {
	return walk(b, func(num protowire.Number, typ protowire.Type, b []byte) (int, error) {
		switch num {
		case 1:
			return consumeUint32(typ, b, (*uint32)(&m.Outcome))
		case 2:
			return consumeInt64(typ, b, &m.RetryAfterMs)
		case 3:
			return consumeString(typ, b, &m.Reason)
		case 15:
			return consumeString(typ, b, &m.Error)
		}
		return -1, nil
	})
}
