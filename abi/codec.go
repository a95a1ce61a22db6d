package abi

// Hand-written protobuf wire codec for the messages in messages.go, over
// protowire only: no reflection and no generated code, so a Go guest that
// links it stays small (ABI.md "Wire messages"). Encoding is deterministic
// (fields in number order, zero scalars and empty messages omitted, map
// entries sorted by key) so equal messages encode to equal bytes.
//
// Decoding follows proto3 merge rules (a singular field seen twice: the last
// scalar wins and nested messages merge; repeated and map fields
// accumulate, the last map key wins), skips unknown fields so an older peer
// reads a newer message, and rejects malformed or oversized input with an
// error wrapping ErrMalformed; it never panics on any input.

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"unsafe"

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
	if num < 16 && len(v) < 0x80 { // one-byte tag and length: no varint calls
		b = append(b, byte(num)<<3|byte(protowire.BytesType), byte(len(v)))
		return append(b, v...)
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, v)
}

// appendRepeatedString keeps empty items: their count is part of the value.
func appendRepeatedString(b []byte, num protowire.Number, vs []string) []byte {
	for _, v := range vs {
		b = protowire.AppendTag(b, num, protowire.BytesType)
		b = protowire.AppendString(b, v)
	}
	return b
}

func appendVarint(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	if num < 16 && v < 0x80 {
		return append(b, byte(num)<<3|byte(protowire.VarintType), byte(v))
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
	var small [16]string // no allocation for the usual small map
	keys := small[:0]
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

// The decoders below are plain loops with a switch per message and one-byte
// fast paths for tags, lengths and varints: a Go wasm guest pays dearly for
// calls (no indirect callbacks per field) and allocations (no per-field
// copies), and it decodes every request (measured in ABI.md's numbers).

func tagError(n int) error { return fmt.Errorf("tag: %w", protowire.ParseError(n)) }

// consumeLen is protowire.ConsumeBytes with a fast path for lengths below 128.
func consumeLen(b []byte) ([]byte, int) {
	if len(b) > 0 && b[0] < 0x80 {
		m := int(b[0])
		if m+1 > len(b) {
			return nil, -1 // truncated
		}
		return b[1 : 1+m], 1 + m
	}
	return protowire.ConsumeBytes(b)
}

// skipField skips an unknown field's value (forward compatibility).
func skipField(num protowire.Number, typ protowire.Type, b []byte) (int, error) {
	n := protowire.ConsumeFieldValue(num, typ, b)
	if n < 0 {
		return 0, fmt.Errorf("unknown field: %w", protowire.ParseError(n))
	}
	return n, nil
}

// lenError reports a failed consumeLen or protowire call.
func lenError(n int) error {
	if n == -1 {
		return io.ErrUnexpectedEOF
	}
	return protowire.ParseError(n)
}

func wantType(got, want protowire.Type) error {
	if got != want {
		return fmt.Errorf("wire type %d, want %d", got, want)
	}
	return nil
}

// decoder carries one immutable copy of the input being decoded. String
// fields are substrings of it, so decoding a message costs one string
// allocation instead of one per field: a Go guest decodes every request, and
// allocation in a wasm guest is slow. A decoded message therefore keeps its
// whole input alive while any of its strings is referenced (at most
// MaxMessageSize bytes).
type decoder struct {
	s    string
	base []byte // read-only view of s; every b the decode walks is a subslice of it
}

func newDecoder(b []byte) (decoder, error) {
	if len(b) > MaxMessageSize {
		return decoder{}, fmt.Errorf("%d bytes exceeds the %d byte limit", len(b), MaxMessageSize)
	}
	s := string(b)
	// base aliases s's bytes without a copy; the codec never writes through
	// it, so s stays immutable as the language requires.
	return decoder{s: s, base: unsafe.Slice(unsafe.StringData(s), len(s))}, nil
}

// str returns the substring of d.s that v, a subslice of d.base, covers.
// Subslicing keeps the capacity's end fixed, so v starts at
// cap(base)-cap(v).
func (d decoder) str(v []byte) string {
	i := cap(d.base) - cap(v)
	return d.s[i : i+len(v)]
}

func (d decoder) consumeString(typ protowire.Type, b []byte, dst *string) (int, error) {
	if typ != protowire.BytesType {
		return 0, wantType(typ, protowire.BytesType)
	}
	// consumeLen and str by hand: one call per string field, not three.
	if len(b) > 0 && b[0] < 0x80 {
		m := int(b[0])
		if m >= len(b) {
			return 0, io.ErrUnexpectedEOF
		}
		i := cap(d.base) - cap(b) + 1
		*dst = d.s[i : i+m]
		return 1 + m, nil
	}
	v, n := protowire.ConsumeBytes(b)
	if n < 0 {
		return 0, protowire.ParseError(n)
	}
	*dst = d.str(v)
	return n, nil
}

// consumeRepeatedString appends one item of a repeated string field.
func (d decoder) consumeRepeatedString(typ protowire.Type, b []byte, dst *[]string) (int, error) {
	if len(*dst) >= MaxRepeated {
		return 0, fmt.Errorf("more than %d items", MaxRepeated)
	}
	var v string
	n, err := d.consumeString(typ, b, &v)
	if err != nil {
		return 0, err
	}
	*dst = append(*dst, v)
	return n, nil
}

func consumeVarint(typ protowire.Type, b []byte) (uint64, int, error) {
	if typ != protowire.VarintType {
		return 0, 0, wantType(typ, protowire.VarintType)
	}
	if len(b) > 0 && b[0] < 0x80 {
		return uint64(b[0]), 1, nil
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
func (d decoder) consumeMessage(typ protowire.Type, b []byte, dec func(decoder, []byte) error) (int, error) {
	if typ != protowire.BytesType {
		return 0, wantType(typ, protowire.BytesType)
	}
	v, n := consumeLen(b)
	if n < 0 {
		return 0, lenError(n)
	}
	return n, dec(d, v)
}

// consumeRepeated appends one decoded element to *s, enforcing MaxRepeated.
func consumeRepeated[T any](d decoder, typ protowire.Type, b []byte, s *[]T, dec func(*T, decoder, []byte) error) (int, error) {
	if len(*s) >= MaxRepeated {
		return 0, fmt.Errorf("more than %d items", MaxRepeated)
	}
	// Decode in place at the end of the slice: a local would escape to the
	// heap through dec and cost an allocation per item.
	var zero T
	*s = append(*s, zero)
	item := &(*s)[len(*s)-1]
	n, err := d.consumeMessage(typ, b, func(d decoder, b []byte) error { return dec(item, d, b) })
	if err != nil {
		*s = (*s)[:len(*s)-1]
		return 0, fmt.Errorf("item %d: %w", len(*s), err)
	}
	return n, nil
}

// countFields counts the length-delimited occurrences of field numbers 1..15
// at the top level of b, stopping at the first malformed tag. Decoders use
// it to size repeated fields once instead of growing them.
func countFields(b []byte) (counts [16]int) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return counts
		}
		b = b[n:]
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			return counts
		}
		if typ == protowire.BytesType && num < 16 {
			counts[num]++
		}
		b = b[m:]
	}
	return counts
}

// presize gives a nil repeated field room for n items (at most MaxRepeated).
func presize[T any](s *[]T, n int) {
	if *s == nil && n > 0 {
		*s = make([]T, 0, min(n, MaxRepeated))
	}
}

// consumeMapEntry decodes one map<string,string> entry into *m.
func (d decoder) consumeMapEntry(typ protowire.Type, b []byte, m *map[string]string) (int, error) {
	if len(*m) >= MaxRepeated {
		return 0, fmt.Errorf("more than %d entries", MaxRepeated)
	}
	if typ != protowire.BytesType {
		return 0, wantType(typ, protowire.BytesType)
	}
	e, n := consumeLen(b)
	if n < 0 {
		return 0, lenError(n)
	}
	var k, v string
	for len(e) > 0 {
		num, typ, l := protowire.ConsumeTag(e)
		if l < 0 {
			return 0, fmt.Errorf("map entry: tag: %w", protowire.ParseError(l))
		}
		e = e[l:]
		var err error
		switch num {
		case 1:
			l, err = d.consumeString(typ, e, &k)
		case 2:
			l, err = d.consumeString(typ, e, &v)
		default:
			l, err = skipField(num, typ, e)
		}
		if err != nil {
			return 0, fmt.Errorf("map entry: field %d: %w", num, err)
		}
		e = e[l:]
	}
	if *m == nil {
		*m = make(map[string]string)
	}
	(*m)[k] = v
	return n, nil
}

// malformed names the message in a decoding error and wraps ErrMalformed.
func malformed(name string, err error) error {
	return fmt.Errorf("%w: %s: %w", ErrMalformed, name, err)
}

// Each Unmarshal decodes into a fresh value with a direct call to merge and
// replaces the message only on success, so a failed decode leaves it
// untouched. (A generic helper taking merge as a func value would make the
// value and the decoder escape: two allocations per message.)

// ---- ConfigureRequest ----

// MarshalAppend appends the encoding of m to b.
func (m *ConfigureRequest) MarshalAppend(b []byte) []byte {
	b = appendString(b, 1, m.ModuleName)
	return appendMap(b, 2, m.Config)
}

// Unmarshal replaces m with the message encoded in b.
func (m *ConfigureRequest) Unmarshal(b []byte) error {
	d, err := newDecoder(b)
	var v ConfigureRequest
	if err == nil {
		err = v.merge(d, d.base)
	}
	if err != nil {
		return malformed("ConfigureRequest", err)
	}
	*m = v
	return nil
}

func (m *ConfigureRequest) merge(d decoder, b []byte) error {
	for len(b) > 0 {
		// One-byte tags (fields 1..15) decoded inline: a call per field is
		// costly in a wasm guest.
		c := b[0]
		num, typ, n := protowire.Number(c>>3), protowire.Type(c&7), 1
		if c-8 >= 0x78 {
			if num, typ, n = protowire.ConsumeTag(b); n < 0 {
				return tagError(n)
			}
		}
		b = b[n:]
		var err error
		switch num {
		case 1:
			n, err = d.consumeString(typ, b, &m.ModuleName)
		case 2:
			n, err = d.consumeMapEntry(typ, b, &m.Config)
		default:
			n, err = skipField(num, typ, b)
		}
		if err != nil {
			return fmt.Errorf("field %d: %w", num, err)
		}
		b = b[n:]
	}
	return nil
}

// ---- ConfigureResponse ----

// MarshalAppend appends the encoding of m to b.
func (m *ConfigureResponse) MarshalAppend(b []byte) []byte {
	b = appendString(b, 1, m.Version)
	b = appendRepeatedString(b, 2, m.AdaptSteps)
	return appendString(b, 15, m.Error)
}

// Unmarshal replaces m with the message encoded in b.
func (m *ConfigureResponse) Unmarshal(b []byte) error {
	d, err := newDecoder(b)
	var v ConfigureResponse
	if err == nil {
		err = v.merge(d, d.base)
	}
	if err != nil {
		return malformed("ConfigureResponse", err)
	}
	*m = v
	return nil
}

func (m *ConfigureResponse) merge(d decoder, b []byte) error {
	for len(b) > 0 {
		// One-byte tags (fields 1..15) decoded inline: a call per field is
		// costly in a wasm guest.
		c := b[0]
		num, typ, n := protowire.Number(c>>3), protowire.Type(c&7), 1
		if c-8 >= 0x78 {
			if num, typ, n = protowire.ConsumeTag(b); n < 0 {
				return tagError(n)
			}
		}
		b = b[n:]
		var err error
		switch num {
		case 1:
			n, err = d.consumeString(typ, b, &m.Version)
		case 2:
			n, err = d.consumeRepeatedString(typ, b, &m.AdaptSteps)
		case 15:
			n, err = d.consumeString(typ, b, &m.Error)
		default:
			n, err = skipField(num, typ, b)
		}
		if err != nil {
			return fmt.Errorf("field %d: %w", num, err)
		}
		b = b[n:]
	}
	return nil
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
	d, err := newDecoder(b)
	var v VolumeView
	if err == nil {
		err = v.merge(d, d.base)
	}
	if err != nil {
		return malformed("VolumeView", err)
	}
	*m = v
	return nil
}

func (m *VolumeView) merge(d decoder, b []byte) error {
	for len(b) > 0 {
		// One-byte tags (fields 1..15) decoded inline: a call per field is
		// costly in a wasm guest.
		c := b[0]
		num, typ, n := protowire.Number(c>>3), protowire.Type(c&7), 1
		if c-8 >= 0x78 {
			if num, typ, n = protowire.ConsumeTag(b); n < 0 {
				return tagError(n)
			}
		}
		b = b[n:]
		var err error
		switch num {
		case 1:
			n, err = d.consumeString(typ, b, &m.Namespace)
		case 2:
			n, err = d.consumeString(typ, b, &m.ID)
		case 3:
			n, err = d.consumeString(typ, b, &m.PluginID)
		case 4:
			n, err = d.consumeString(typ, b, &m.AccessMode)
		case 5:
			n, err = d.consumeString(typ, b, &m.AttachmentMode)
		case 6:
			n, err = d.consumeString(typ, b, &m.ExternalID)
		case 7:
			n, err = d.consumeMapEntry(typ, b, &m.Context)
		default:
			n, err = skipField(num, typ, b)
		}
		if err != nil {
			return fmt.Errorf("field %d: %w", num, err)
		}
		b = b[n:]
	}
	return nil
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
	d, err := newDecoder(b)
	var v ClaimView
	if err == nil {
		err = v.merge(d, d.base)
	}
	if err != nil {
		return malformed("ClaimView", err)
	}
	*m = v
	return nil
}

func (m *ClaimView) merge(d decoder, b []byte) error {
	for len(b) > 0 {
		// One-byte tags (fields 1..15) decoded inline: a call per field is
		// costly in a wasm guest.
		c := b[0]
		num, typ, n := protowire.Number(c>>3), protowire.Type(c&7), 1
		if c-8 >= 0x78 {
			if num, typ, n = protowire.ConsumeTag(b); n < 0 {
				return tagError(n)
			}
		}
		b = b[n:]
		var err error
		switch num {
		case 1:
			n, err = d.consumeString(typ, b, &m.AllocID)
		case 2:
			n, err = d.consumeString(typ, b, &m.NodeID)
		case 3:
			n, err = d.consumeString(typ, b, &m.Mode)
		case 4:
			n, err = d.consumeString(typ, b, &m.State)
		case 5:
			n, err = consumeUint32(typ, b, &m.Attempts)
		case 6:
			n, err = consumeUint32(typ, b, &m.LastErrorCode)
		case 7:
			n, err = d.consumeString(typ, b, &m.LastErrorKind)
		case 8:
			n, err = d.consumeString(typ, b, &m.ExternalNodeID)
		case 9:
			n, err = d.consumeString(typ, b, &m.AccessMode)
		case 10:
			n, err = d.consumeString(typ, b, &m.AttachmentMode)
		default:
			n, err = skipField(num, typ, b)
		}
		if err != nil {
			return fmt.Errorf("field %d: %w", num, err)
		}
		b = b[n:]
	}
	return nil
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
	d, err := newDecoder(b)
	var v AllocView
	if err == nil {
		err = v.merge(d, d.base)
	}
	if err != nil {
		return malformed("AllocView", err)
	}
	*m = v
	return nil
}

func (m *AllocView) merge(d decoder, b []byte) error {
	for len(b) > 0 {
		// One-byte tags (fields 1..15) decoded inline: a call per field is
		// costly in a wasm guest.
		c := b[0]
		num, typ, n := protowire.Number(c>>3), protowire.Type(c&7), 1
		if c-8 >= 0x78 {
			if num, typ, n = protowire.ConsumeTag(b); n < 0 {
				return tagError(n)
			}
		}
		b = b[n:]
		var err error
		switch num {
		case 1:
			n, err = d.consumeString(typ, b, &m.ID)
		case 2:
			n, err = d.consumeString(typ, b, &m.ClientStatus)
		case 3:
			n, err = consumeInt64(typ, b, &m.TerminalAgeMs)
		default:
			n, err = skipField(num, typ, b)
		}
		if err != nil {
			return fmt.Errorf("field %d: %w", num, err)
		}
		b = b[n:]
	}
	return nil
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
	d, err := newDecoder(b)
	var v NodeView
	if err == nil {
		err = v.merge(d, d.base)
	}
	if err != nil {
		return malformed("NodeView", err)
	}
	*m = v
	return nil
}

func (m *NodeView) merge(d decoder, b []byte) error {
	for len(b) > 0 {
		// One-byte tags (fields 1..15) decoded inline: a call per field is
		// costly in a wasm guest.
		c := b[0]
		num, typ, n := protowire.Number(c>>3), protowire.Type(c&7), 1
		if c-8 >= 0x78 {
			if num, typ, n = protowire.ConsumeTag(b); n < 0 {
				return tagError(n)
			}
		}
		b = b[n:]
		var err error
		switch num {
		case 1:
			n, err = d.consumeString(typ, b, &m.ID)
		case 2:
			n, err = d.consumeString(typ, b, &m.Status)
		case 3:
			n, err = consumeInt64(typ, b, &m.LastSeenAgeMs)
		case 4:
			n, err = d.consumeMapEntry(typ, b, &m.Meta)
		case 5:
			n, err = d.consumeString(typ, b, &m.ExternalID)
		default:
			n, err = skipField(num, typ, b)
		}
		if err != nil {
			return fmt.Errorf("field %d: %w", num, err)
		}
		b = b[n:]
	}
	return nil
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
	d, err := newDecoder(b)
	var v PolicyRequest
	if err == nil {
		err = v.merge(d, d.base)
	}
	if err != nil {
		return malformed("PolicyRequest", err)
	}
	*m = v
	return nil
}

func (m *PolicyRequest) merge(d decoder, b []byte) error {
	c := countFields(b)
	presize(&m.Claims, c[3])
	presize(&m.Allocs, c[4])
	presize(&m.Nodes, c[5])
	for len(b) > 0 {
		// One-byte tags (fields 1..15) decoded inline: a call per field is
		// costly in a wasm guest.
		c := b[0]
		num, typ, n := protowire.Number(c>>3), protowire.Type(c&7), 1
		if c-8 >= 0x78 {
			if num, typ, n = protowire.ConsumeTag(b); n < 0 {
				return tagError(n)
			}
		}
		b = b[n:]
		var err error
		switch num {
		case 1:
			n, err = consumeInt64(typ, b, &m.NowUnixMs)
		case 2:
			n, err = d.consumeMessage(typ, b, m.Volume.merge)
		case 3:
			n, err = consumeRepeated(d, typ, b, &m.Claims, (*ClaimView).merge)
		case 4:
			n, err = consumeRepeated(d, typ, b, &m.Allocs, (*AllocView).merge)
		case 5:
			n, err = consumeRepeated(d, typ, b, &m.Nodes, (*NodeView).merge)
		default:
			n, err = skipField(num, typ, b)
		}
		if err != nil {
			return fmt.Errorf("field %d: %w", num, err)
		}
		b = b[n:]
	}
	return nil
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
	d, err := newDecoder(b)
	var v Decision
	if err == nil {
		err = v.merge(d, d.base)
	}
	if err != nil {
		return malformed("Decision", err)
	}
	*m = v
	return nil
}

func (m *Decision) merge(d decoder, b []byte) error {
	for len(b) > 0 {
		// One-byte tags (fields 1..15) decoded inline: a call per field is
		// costly in a wasm guest.
		c := b[0]
		num, typ, n := protowire.Number(c>>3), protowire.Type(c&7), 1
		if c-8 >= 0x78 {
			if num, typ, n = protowire.ConsumeTag(b); n < 0 {
				return tagError(n)
			}
		}
		b = b[n:]
		var err error
		switch num {
		case 1:
			n, err = d.consumeString(typ, b, &m.AllocID)
		case 2:
			n, err = consumeUint32(typ, b, (*uint32)(&m.Action))
		case 3:
			n, err = consumeInt64(typ, b, &m.RetryAfterMs)
		case 4:
			n, err = d.consumeString(typ, b, &m.Reason)
		default:
			n, err = skipField(num, typ, b)
		}
		if err != nil {
			return fmt.Errorf("field %d: %w", num, err)
		}
		b = b[n:]
	}
	return nil
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
	d, err := newDecoder(b)
	var v PolicyResponse
	if err == nil {
		err = v.merge(d, d.base)
	}
	if err != nil {
		return malformed("PolicyResponse", err)
	}
	*m = v
	return nil
}

func (m *PolicyResponse) merge(d decoder, b []byte) error {
	presize(&m.Decisions, countFields(b)[1])
	for len(b) > 0 {
		// One-byte tags (fields 1..15) decoded inline: a call per field is
		// costly in a wasm guest.
		c := b[0]
		num, typ, n := protowire.Number(c>>3), protowire.Type(c&7), 1
		if c-8 >= 0x78 {
			if num, typ, n = protowire.ConsumeTag(b); n < 0 {
				return tagError(n)
			}
		}
		b = b[n:]
		var err error
		switch num {
		case 1:
			n, err = consumeRepeated(d, typ, b, &m.Decisions, (*Decision).merge)
		case 15:
			n, err = d.consumeString(typ, b, &m.Error)
		default:
			n, err = skipField(num, typ, b)
		}
		if err != nil {
			return fmt.Errorf("field %d: %w", num, err)
		}
		b = b[n:]
	}
	return nil
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
	d, err := newDecoder(b)
	var v PluginView
	if err == nil {
		err = v.merge(d, d.base)
	}
	if err != nil {
		return malformed("PluginView", err)
	}
	*m = v
	return nil
}

func (m *PluginView) merge(d decoder, b []byte) error {
	for len(b) > 0 {
		// One-byte tags (fields 1..15) decoded inline: a call per field is
		// costly in a wasm guest.
		c := b[0]
		num, typ, n := protowire.Number(c>>3), protowire.Type(c&7), 1
		if c-8 >= 0x78 {
			if num, typ, n = protowire.ConsumeTag(b); n < 0 {
				return tagError(n)
			}
		}
		b = b[n:]
		var err error
		switch num {
		case 1:
			n, err = d.consumeString(typ, b, &m.ID)
		case 2:
			n, err = d.consumeString(typ, b, &m.Provider)
		case 3:
			n, err = consumeBool(typ, b, &m.PublishUnpublish)
		case 4:
			n, err = consumeBool(typ, b, &m.StageUnstage)
		default:
			n, err = skipField(num, typ, b)
		}
		if err != nil {
			return fmt.Errorf("field %d: %w", num, err)
		}
		b = b[n:]
	}
	return nil
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
	d, err := newDecoder(b)
	var v AdapterRequest
	if err == nil {
		err = v.merge(d, d.base)
	}
	if err != nil {
		return malformed("AdapterRequest", err)
	}
	*m = v
	return nil
}

func (m *AdapterRequest) merge(d decoder, b []byte) error {
	for len(b) > 0 {
		// One-byte tags (fields 1..15) decoded inline: a call per field is
		// costly in a wasm guest.
		c := b[0]
		num, typ, n := protowire.Number(c>>3), protowire.Type(c&7), 1
		if c-8 >= 0x78 {
			if num, typ, n = protowire.ConsumeTag(b); n < 0 {
				return tagError(n)
			}
		}
		b = b[n:]
		var err error
		switch num {
		case 1:
			n, err = d.consumeString(typ, b, &m.Step)
		case 2:
			n, err = d.consumeMessage(typ, b, m.Claim.merge)
		case 3:
			n, err = d.consumeMessage(typ, b, m.Volume.merge)
		case 4:
			n, err = d.consumeMessage(typ, b, m.Node.merge)
		case 5:
			n, err = d.consumeMessage(typ, b, m.Plugin.merge)
		case 6:
			n, err = consumeInt64(typ, b, &m.NowUnixMs)
		default:
			n, err = skipField(num, typ, b)
		}
		if err != nil {
			return fmt.Errorf("field %d: %w", num, err)
		}
		b = b[n:]
	}
	return nil
}

// ---- AdapterResponse ----

// MarshalAppend appends the encoding of m to b.
func (m *AdapterResponse) MarshalAppend(b []byte) []byte {
	b = appendString(b, 1, m.VolumeID)
	b = appendString(b, 2, m.NodeID)
	b = appendRepeatedString(b, 3, m.SecretKeys)
	b = appendMap(b, 4, m.VolumeContext)
	return appendString(b, 15, m.Error)
}

// Unmarshal replaces m with the message encoded in b.
func (m *AdapterResponse) Unmarshal(b []byte) error {
	d, err := newDecoder(b)
	var v AdapterResponse
	if err == nil {
		err = v.merge(d, d.base)
	}
	if err != nil {
		return malformed("AdapterResponse", err)
	}
	*m = v
	return nil
}

func (m *AdapterResponse) merge(d decoder, b []byte) error {
	for len(b) > 0 {
		// One-byte tags (fields 1..15) decoded inline: a call per field is
		// costly in a wasm guest.
		c := b[0]
		num, typ, n := protowire.Number(c>>3), protowire.Type(c&7), 1
		if c-8 >= 0x78 {
			if num, typ, n = protowire.ConsumeTag(b); n < 0 {
				return tagError(n)
			}
		}
		b = b[n:]
		var err error
		switch num {
		case 1:
			n, err = d.consumeString(typ, b, &m.VolumeID)
		case 2:
			n, err = d.consumeString(typ, b, &m.NodeID)
		case 3:
			n, err = d.consumeRepeatedString(typ, b, &m.SecretKeys)
		case 4:
			n, err = d.consumeMapEntry(typ, b, &m.VolumeContext)
		case 15:
			n, err = d.consumeString(typ, b, &m.Error)
		default:
			n, err = skipField(num, typ, b)
		}
		if err != nil {
			return fmt.Errorf("field %d: %w", num, err)
		}
		b = b[n:]
	}
	return nil
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
	d, err := newDecoder(b)
	var v ClassifyRequest
	if err == nil {
		err = v.merge(d, d.base)
	}
	if err != nil {
		return malformed("ClassifyRequest", err)
	}
	*m = v
	return nil
}

func (m *ClassifyRequest) merge(d decoder, b []byte) error {
	for len(b) > 0 {
		// One-byte tags (fields 1..15) decoded inline: a call per field is
		// costly in a wasm guest.
		c := b[0]
		num, typ, n := protowire.Number(c>>3), protowire.Type(c&7), 1
		if c-8 >= 0x78 {
			if num, typ, n = protowire.ConsumeTag(b); n < 0 {
				return tagError(n)
			}
		}
		b = b[n:]
		var err error
		switch num {
		case 1:
			n, err = d.consumeString(typ, b, &m.Step)
		case 2:
			n, err = consumeUint32(typ, b, &m.Code)
		case 3:
			n, err = d.consumeString(typ, b, &m.Message)
		case 4:
			n, err = consumeUint32(typ, b, &m.Attempts)
		case 5:
			n, err = d.consumeString(typ, b, &m.PluginID)
		case 6:
			n, err = d.consumeString(typ, b, &m.VolumeID)
		default:
			n, err = skipField(num, typ, b)
		}
		if err != nil {
			return fmt.Errorf("field %d: %w", num, err)
		}
		b = b[n:]
	}
	return nil
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
	d, err := newDecoder(b)
	var v ClassifyResponse
	if err == nil {
		err = v.merge(d, d.base)
	}
	if err != nil {
		return malformed("ClassifyResponse", err)
	}
	*m = v
	return nil
}

func (m *ClassifyResponse) merge(d decoder, b []byte) error {
	for len(b) > 0 {
		// One-byte tags (fields 1..15) decoded inline: a call per field is
		// costly in a wasm guest.
		c := b[0]
		num, typ, n := protowire.Number(c>>3), protowire.Type(c&7), 1
		if c-8 >= 0x78 {
			if num, typ, n = protowire.ConsumeTag(b); n < 0 {
				return tagError(n)
			}
		}
		b = b[n:]
		var err error
		switch num {
		case 1:
			n, err = consumeUint32(typ, b, (*uint32)(&m.Outcome))
		case 2:
			n, err = consumeInt64(typ, b, &m.RetryAfterMs)
		case 3:
			n, err = d.consumeString(typ, b, &m.Reason)
		case 15:
			n, err = d.consumeString(typ, b, &m.Error)
		default:
			n, err = skipField(num, typ, b)
		}
		if err != nil {
			return fmt.Errorf("field %d: %w", num, err)
		}
		b = b[n:]
	}
	return nil
}
