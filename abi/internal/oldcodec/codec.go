package oldcodec

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

// The encoders below skip zero fields inline (appendString and appendVarint
// are small enough to be inlined) and write nested messages through
// openNested and closeNested instead of a callback, so a Go guest encoding
// its response makes one call per non-empty field and per nested message
// (see "decoding helpers" for why calls matter).

func appendString(b []byte, num protowire.Number, v string) []byte {
	if v == "" {
		return b
	}
	return appendStringField(b, num, v)
}

func appendStringField(b []byte, num protowire.Number, v string) []byte {
	if num < 16 && len(v) < 0x80 { // one-byte tag and length: no varint calls
		return appendShortString(b, num, v)
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, v)
}

// appendShortString appends string field num (1..15) holding v, which is
// shorter than 128 bytes: one-byte tag and length.
func appendShortString(b []byte, num protowire.Number, v string) []byte {
	return append(append(b, byte(num)<<3|byte(protowire.BytesType), byte(len(v))), v...)
}

// appendShort appends string field tag (a one-byte tag) holding v, shorter
// than 128 bytes, unless v is empty: the inline form of appendString for
// the request encoders' fast paths below, which check the lengths once per
// message instead (the host encodes every claim of every request, and a
// call per field was a third of its encoding, issue 17).
func appendShort(b []byte, tag byte, v string) []byte {
	if v != "" {
		b = append(b, tag, byte(len(v)))
		b = append(b, v...)
	}
	return b
}

// appendRepeatedString keeps empty items: their count is part of the value.
func appendRepeatedString(b []byte, num protowire.Number, vs []string) []byte {
	if len(vs) == 0 { // inline: the usual case
		return b
	}
	return appendStrings(b, num, vs)
}

func appendStrings(b []byte, num protowire.Number, vs []string) []byte {
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
	return appendVarintField(b, num, v)
}

func appendVarintField(b []byte, num protowire.Number, v uint64) []byte {
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
	return appendVarintField(b, num, 1)
}

// openNested starts field num (1..15, a one-byte tag, as every message and
// map field of volhost.proto has) with a one-byte length placeholder; the
// body follows and closeNested(b, len(b) after openNested) sets the length.
// Reserving one byte and moving the body when the length needs more avoids a
// separate size pass or a temporary buffer.
func openNested(b []byte, num protowire.Number) []byte {
	return append(b, byte(num)<<3|byte(protowire.BytesType), 0)
}

// closeNested sets the length of the field whose body starts at start.
func closeNested(b []byte, start int) []byte {
	if n := len(b) - start; n < 0x80 {
		b[start-1] = byte(n)
	} else {
		b = moveNested(b, start)
	}
	return b
}

// moveNested makes room for a length of more than one byte before the body
// at start and writes it.
func moveNested(b []byte, start int) []byte {
	n := len(b) - start
	sz := protowire.SizeVarint(uint64(n))
	b = append(b, make([]byte, sz-1)...)
	copy(b[start-1+sz:], b[start:start+n])
	protowire.AppendVarint(b[start-1:start-1], uint64(n))
	return b
}

// closeNestedOmitEmpty is closeNested for a singular message field, which
// is dropped when its body is empty (proto3: absent equals default).
func closeNestedOmitEmpty(b []byte, start int) []byte {
	if len(b) == start {
		return b[:start-2]
	}
	return closeNested(b, start)
}

// appendMap encodes a map<string,string> as repeated entries {1: key, 2: value}
// sorted by key.
func appendMap(b []byte, num protowire.Number, m map[string]string) []byte {
	if len(m) == 0 { // inline: the usual case
		return b
	}
	return appendMapEntries(b, num, m)
}

func appendMapEntries(b []byte, num protowire.Number, m map[string]string) []byte {
	var small [16]string // no allocation for the usual small map
	keys := small[:0]
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		b = openNested(b, num)
		start := len(b)
		b = appendString(b, 1, k)
		b = appendString(b, 2, m[k])
		b = closeNested(b, start)
	}
	return b
}

// ---- decoding helpers ----

// A Go guest decodes every request, and under a host's call timeout every
// guest function call and loop iteration it executes costs an exit from the
// wasm code (~100-150 ns: wazero checks for termination at each loop
// header, and Go's wasm backend puts a loop at the entry of every non-leaf
// function; ABI.md section 12). So each merge below is one loop over the
// fields that decodes the tag and the value inline when they fit one byte
// (fields 1..15, lengths and varints under 128: the common case) and stores
// scalar and string fields with setters small enough to be inlined (no
// calls, errors as sentinels that fieldError spells out). A nested message
// costs one call (its merge), a map entry one, nothing else does unless it
// is long or malformed.

var (
	errWantBytes  = errors.New("want bytes")  // replaced by wantType in fieldError
	errWantVarint = errors.New("want varint") // replaced by wantType in fieldError
	errTooMany    = fmt.Errorf("more than %d items", MaxRepeated)
)

func tagError(n int) error { return fmt.Errorf("tag: %w", protowire.ParseError(n)) }

// valueError reports a value protowire could not parse (n < 0).
func valueError(num protowire.Number, n int) error {
	return fmt.Errorf("field %d: %w", num, protowire.ParseError(n))
}

// fieldError names the field in a decoding error, spelling out a setter's
// wire type sentinel.
func fieldError(num protowire.Number, typ protowire.Type, err error) error {
	switch err {
	case errWantBytes:
		err = wantType(typ, protowire.BytesType)
	case errWantVarint:
		err = wantType(typ, protowire.VarintType)
	}
	return fmt.Errorf("field %d: %w", num, err)
}

func itemError(i int, err error) error { return fmt.Errorf("item %d: %w", i, err) }

// skipField skips an unknown field's value (forward compatibility) of a wire
// type other than bytes and varint, which the merge loops skip themselves.
func skipField(num protowire.Number, typ protowire.Type, b []byte) (int, error) {
	n := protowire.ConsumeFieldValue(num, typ, b)
	if n < 0 {
		return 0, fmt.Errorf("unknown field: %w", protowire.ParseError(n))
	}
	return n, nil
}

func wantType(got, want protowire.Type) error {
	return fmt.Errorf("wire type %d, want %d", got, want)
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

// borrowingDecoder is newDecoder without the copy: its strings alias b,
// which the caller keeps unchanged while they are in use. base is b with
// its capacity cut to its length, as str requires.
func borrowingDecoder(b []byte) (decoder, error) {
	if len(b) > MaxMessageSize {
		return decoder{}, fmt.Errorf("%d bytes exceeds the %d byte limit", len(b), MaxMessageSize)
	}
	return decoder{s: unsafe.String(unsafe.SliceData(b), len(b)), base: b[:len(b):len(b)]}, nil
}

// str returns the substring of d.s that v, a subslice of d.base, covers.
// Subslicing keeps the capacity's end fixed, so v starts at
// cap(base)-cap(v).
func (d *decoder) str(v []byte) string {
	i := cap(d.base) - cap(v)
	return d.s[i : i+len(v)]
}

// setString stores a string field's value v.
func (d *decoder) setString(typ protowire.Type, v []byte, dst *string) error {
	if typ != protowire.BytesType {
		return errWantBytes
	}
	*dst = d.str(v)
	return nil
}

// addString appends one item of a repeated string field.
func (d *decoder) addString(typ protowire.Type, v []byte, dst *[]string) error {
	if len(*dst) >= MaxRepeated {
		return errTooMany
	}
	var s string
	if err := d.setString(typ, v, &s); err != nil {
		return err
	}
	*dst = append(*dst, s)
	return nil
}

func setUint32(typ protowire.Type, x uint64, dst *uint32) error {
	if typ != protowire.VarintType {
		return errWantVarint
	}
	*dst = uint32(x) // proto3 uint32/enum semantics: truncate to 32 bits
	return nil
}

func setInt64(typ protowire.Type, x uint64, dst *int64) error {
	if typ != protowire.VarintType {
		return errWantVarint
	}
	*dst = int64(x)
	return nil
}

func setBool(typ protowire.Type, x uint64, dst *bool) error {
	if typ != protowire.VarintType {
		return errWantVarint
	}
	*dst = x != 0
	return nil
}

func wantBytes(typ protowire.Type) error {
	if typ != protowire.BytesType {
		return errWantBytes
	}
	return nil
}

// checkItem is the check before decoding item n of a repeated message field.
func checkItem(typ protowire.Type, n int) error {
	if n >= MaxRepeated {
		return errTooMany
	}
	return wantBytes(typ)
}

// The merges below start with a fast path for the common encoding: the
// known fields in number order (as every encoder writes them), each with a
// one-byte tag and, for strings and messages, a one-byte length, decoded by
// straight-line code, one step per field. In a Go wasm guest every jump
// within a function goes through the function's dispatch loop, so under a
// host's call timeout each taken branch costs an exit (ABI.md section 12),
// and the general loop below takes about ten per field; the fast path takes
// one or two, and ends the message (goto done) once its bytes are used up.
// It only consumes from the front of b, exactly as the loop would, passing
// over the fields it expects that are absent; the loop takes whatever is
// left, so what is decoded never depends on which path ran (the fuzz
// targets check that the two agree).

// shortBytes returns the value of the bytes field with the one-byte tag
// at the front of b when its length is one byte, and the bytes it takes
// (n == 0: not there).
func shortBytes(b []byte, tag byte) (v []byte, n int) {
	if len(b) > 1 && b[0] == tag && b[1] < 0x80 && int(b[1]) <= len(b)-2 {
		n = 2 + int(b[1])
		return b[2:n], n
	}
	return nil, 0
}

// shortVarint is shortBytes for a varint field with a one-byte value.
func shortVarint(b []byte, tag byte) (x uint64, n int) {
	if len(b) > 1 && b[0] == tag && b[1] < 0x80 {
		return uint64(b[1]), 2
	}
	return 0, 0
}

// itemBytes is shortBytes for a nested message, whose length may take two
// bytes (a claim with long IDs is over 127 bytes): the value of the bytes
// field with the one-byte tag at the front of b, and the bytes it takes
// (n == 0: not there, or not in this short form). The two lengths are
// told apart without a branch, which in a Go guest would be a jump.
func itemBytes(b []byte, tag byte) (v []byte, n int) {
	if len(b) > 2 && b[0] == tag {
		c1, c2 := int(b[1]), int(b[2])
		two := c1 >> 7 // 1 for a two-byte length
		if c1&c2 < 0x80 {
			l := c1&0x7f | c2<<7&-two
			if n = 2 + two + l; n <= len(b) {
				return b[2+two : n], n
			}
		}
	}
	return nil, 0
}

// countFields counts the length-delimited occurrences of field numbers 1..15
// at the top level of b, stopping at the first malformed tag. Decoders use
// it to size repeated fields once instead of growing them (growing the
// claims, allocations and nodes of an 8-claim request costs more guest
// calls than this loop). One-byte tags, lengths and varints are skipped
// inline.
func countFields(b []byte) (counts [16]int) {
	for len(b) > 1 {
		c, l := b[0], b[1]
		if c-8 < 0x78 && l < 0x80 {
			switch protowire.Type(c & 7) {
			case protowire.BytesType:
				counts[c>>3]++
				b = b[min(2+int(l), len(b)):]
				continue
			case protowire.VarintType:
				b = b[2:]
				continue
			}
		}
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

// addMapEntry decodes one map<string,string> entry, v, into *m.
func (d *decoder) addMapEntry(typ protowire.Type, v []byte, m *map[string]string) error {
	if len(*m) >= MaxRepeated {
		return fmt.Errorf("more than %d entries", MaxRepeated)
	}
	if typ != protowire.BytesType {
		return errWantBytes
	}
	if *m == nil {
		*m = make(map[string]string)
	}
	// Fast path (see "decoding helpers"): key then value, nothing else.
	if kv, kn := shortBytes(v, 1<<3|2); kn > 0 {
		if vv, vn := shortBytes(v[kn:], 2<<3|2); vn > 0 && kn+vn == len(v) {
			(*m)[d.str(kv)] = d.str(vv)
			return nil
		}
	}
	var k, val string
	for len(v) > 0 {
		num, typ, l := protowire.Number(v[0]>>3), protowire.Type(v[0]&7), 1
		if v[0]-8 >= 0x78 {
			if num, typ, l = protowire.ConsumeTag(v); l < 0 {
				return fmt.Errorf("map entry: tag: %w", protowire.ParseError(l))
			}
		}
		v = v[l:]
		var err error
		switch num {
		case 1, 2:
			var s []byte
			if typ != protowire.BytesType {
				err = wantType(typ, protowire.BytesType)
			} else if len(v) > 0 && v[0] < 0x80 && int(v[0]) < len(v) {
				s, l = v[1:1+v[0]], 1+int(v[0])
			} else if s, l = protowire.ConsumeBytes(v); l < 0 {
				err = protowire.ParseError(l)
			}
			if err == nil && num == 1 {
				k = d.str(s)
			} else if err == nil {
				val = d.str(s)
			}
		default:
			l, err = skipField(num, typ, v)
		}
		if err != nil {
			return fmt.Errorf("map entry: field %d: %w", num, err)
		}
		v = v[l:]
	}
	(*m)[k] = val
	return nil
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
		err = v.merge(&d, d.base)
	}
	if err != nil {
		return malformed("ConfigureRequest", err)
	}
	*m = v
	return nil
}

func (m *ConfigureRequest) merge(d *decoder, b []byte) error {
	// Fast path (see "decoding helpers"): the fields in number order.
	if v, n := shortBytes(b, 1<<3|2); n > 0 {
		m.ModuleName = d.str(v)
		b = b[n:]
		if len(b) == 0 {
			goto done
		}
	}
	for {
		v, n := shortBytes(b, 2<<3|2)
		if n == 0 {
			break
		}
		if err := d.addMapEntry(protowire.BytesType, v, &m.Config); err != nil {
			return fieldError(2, protowire.BytesType, err)
		}
		b = b[n:]
		if len(b) == 0 {
			goto done
		}
	}
	for len(b) > 0 {
		// The general loop, for what the fast path left: the tag and the
		// value, inline for one-byte tags, lengths and varints.
		c := b[0]
		num, typ, n := protowire.Number(c>>3), protowire.Type(c&7), 1
		if c-8 >= 0x78 {
			if num, typ, n = protowire.ConsumeTag(b); n < 0 {
				return tagError(n)
			}
		}
		b = b[n:]
		var v []byte
		switch typ {
		case protowire.BytesType:
			if len(b) > 0 && b[0] < 0x80 && int(b[0]) < len(b) {
				v, n = b[1:1+b[0]], 1+int(b[0])
			} else if v, n = protowire.ConsumeBytes(b); n < 0 {
				return valueError(num, n)
			}
		case protowire.VarintType:
			if len(b) > 0 && b[0] < 0x80 {
				n = 1
			} else if _, n = protowire.ConsumeVarint(b); n < 0 {
				return valueError(num, n)
			}
		}
		var err error
		switch num {
		case 1:
			err = d.setString(typ, v, &m.ModuleName)
		case 2:
			err = d.addMapEntry(typ, v, &m.Config)
		default:
			if typ != protowire.BytesType && typ != protowire.VarintType {
				n, err = skipField(num, typ, b)
			}
		}
		if err != nil {
			return fieldError(num, typ, err)
		}
		b = b[n:]
	}
done:
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
		err = v.merge(&d, d.base)
	}
	if err != nil {
		return malformed("ConfigureResponse", err)
	}
	*m = v
	return nil
}

func (m *ConfigureResponse) merge(d *decoder, b []byte) error {
	// Fast path (see "decoding helpers"): the fields in number order.
	if v, n := shortBytes(b, 1<<3|2); n > 0 {
		m.Version = d.str(v)
		b = b[n:]
		if len(b) == 0 {
			goto done
		}
	}
	if v, n := shortBytes(b, 15<<3|2); n > 0 {
		m.Error = d.str(v)
		b = b[n:]
		if len(b) == 0 {
			goto done
		}
	}
	for len(b) > 0 {
		// The general loop, for what the fast path left: the tag and the
		// value, inline for one-byte tags, lengths and varints.
		c := b[0]
		num, typ, n := protowire.Number(c>>3), protowire.Type(c&7), 1
		if c-8 >= 0x78 {
			if num, typ, n = protowire.ConsumeTag(b); n < 0 {
				return tagError(n)
			}
		}
		b = b[n:]
		var v []byte
		switch typ {
		case protowire.BytesType:
			if len(b) > 0 && b[0] < 0x80 && int(b[0]) < len(b) {
				v, n = b[1:1+b[0]], 1+int(b[0])
			} else if v, n = protowire.ConsumeBytes(b); n < 0 {
				return valueError(num, n)
			}
		case protowire.VarintType:
			if len(b) > 0 && b[0] < 0x80 {
				n = 1
			} else if _, n = protowire.ConsumeVarint(b); n < 0 {
				return valueError(num, n)
			}
		}
		var err error
		switch num {
		case 1:
			err = d.setString(typ, v, &m.Version)
		case 2:
			err = d.addString(typ, v, &m.AdaptSteps)
		case 15:
			err = d.setString(typ, v, &m.Error)
		default:
			if typ != protowire.BytesType && typ != protowire.VarintType {
				n, err = skipField(num, typ, b)
			}
		}
		if err != nil {
			return fieldError(num, typ, err)
		}
		b = b[n:]
	}
done:
	return nil
}

// ---- VolumeView ----

// MarshalAppend appends the encoding of m to b.
func (m *VolumeView) MarshalAppend(b []byte) []byte {
	if len(m.Namespace)|len(m.ID)|len(m.PluginID)|len(m.AccessMode)|len(m.AttachmentMode)|len(m.ExternalID) < 0x80 && len(m.Context) == 0 {
		b = appendShort(b, 1<<3|2, m.Namespace)
		b = appendShort(b, 2<<3|2, m.ID)
		b = appendShort(b, 3<<3|2, m.PluginID)
		b = appendShort(b, 4<<3|2, m.AccessMode)
		b = appendShort(b, 5<<3|2, m.AttachmentMode)
		return appendShort(b, 6<<3|2, m.ExternalID)
	}
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
		err = v.merge(&d, d.base)
	}
	if err != nil {
		return malformed("VolumeView", err)
	}
	*m = v
	return nil
}

func (m *VolumeView) merge(d *decoder, b []byte) error {
	// Fast path (see "decoding helpers"): the fields in number order.
	if v, n := shortBytes(b, 1<<3|2); n > 0 {
		m.Namespace = d.str(v)
		b = b[n:]
		if len(b) == 0 {
			goto done
		}
	}
	if v, n := shortBytes(b, 2<<3|2); n > 0 {
		m.ID = d.str(v)
		b = b[n:]
		if len(b) == 0 {
			goto done
		}
	}
	if v, n := shortBytes(b, 3<<3|2); n > 0 {
		m.PluginID = d.str(v)
		b = b[n:]
		if len(b) == 0 {
			goto done
		}
	}
	if v, n := shortBytes(b, 4<<3|2); n > 0 {
		m.AccessMode = d.str(v)
		b = b[n:]
		if len(b) == 0 {
			goto done
		}
	}
	if v, n := shortBytes(b, 5<<3|2); n > 0 {
		m.AttachmentMode = d.str(v)
		b = b[n:]
		if len(b) == 0 {
			goto done
		}
	}
	if v, n := shortBytes(b, 6<<3|2); n > 0 {
		m.ExternalID = d.str(v)
		b = b[n:]
		if len(b) == 0 {
			goto done
		}
	}
	for {
		v, n := shortBytes(b, 7<<3|2)
		if n == 0 {
			break
		}
		if err := d.addMapEntry(protowire.BytesType, v, &m.Context); err != nil {
			return fieldError(7, protowire.BytesType, err)
		}
		b = b[n:]
		if len(b) == 0 {
			goto done
		}
	}
	for len(b) > 0 {
		// The general loop, for what the fast path left: the tag and the
		// value, inline for one-byte tags, lengths and varints.
		c := b[0]
		num, typ, n := protowire.Number(c>>3), protowire.Type(c&7), 1
		if c-8 >= 0x78 {
			if num, typ, n = protowire.ConsumeTag(b); n < 0 {
				return tagError(n)
			}
		}
		b = b[n:]
		var v []byte
		switch typ {
		case protowire.BytesType:
			if len(b) > 0 && b[0] < 0x80 && int(b[0]) < len(b) {
				v, n = b[1:1+b[0]], 1+int(b[0])
			} else if v, n = protowire.ConsumeBytes(b); n < 0 {
				return valueError(num, n)
			}
		case protowire.VarintType:
			if len(b) > 0 && b[0] < 0x80 {
				n = 1
			} else if _, n = protowire.ConsumeVarint(b); n < 0 {
				return valueError(num, n)
			}
		}
		var err error
		switch num {
		case 1:
			err = d.setString(typ, v, &m.Namespace)
		case 2:
			err = d.setString(typ, v, &m.ID)
		case 3:
			err = d.setString(typ, v, &m.PluginID)
		case 4:
			err = d.setString(typ, v, &m.AccessMode)
		case 5:
			err = d.setString(typ, v, &m.AttachmentMode)
		case 6:
			err = d.setString(typ, v, &m.ExternalID)
		case 7:
			err = d.addMapEntry(typ, v, &m.Context)
		default:
			if typ != protowire.BytesType && typ != protowire.VarintType {
				n, err = skipField(num, typ, b)
			}
		}
		if err != nil {
			return fieldError(num, typ, err)
		}
		b = b[n:]
	}
done:
	return nil
}

// ---- ClaimView ----

// MarshalAppend appends the encoding of m to b.
func (m *ClaimView) MarshalAppend(b []byte) []byte {
	if len(m.AllocID)|len(m.NodeID)|len(m.Mode)|len(m.State)|len(m.LastErrorKind)|len(m.ExternalNodeID)|len(m.AccessMode)|len(m.AttachmentMode) < 0x80 && m.Attempts|m.LastErrorCode < 0x80 {
		b = appendShort(b, 1<<3|2, m.AllocID)
		b = appendShort(b, 2<<3|2, m.NodeID)
		b = appendShort(b, 3<<3|2, m.Mode)
		b = appendShort(b, 4<<3|2, m.State)
		if m.Attempts != 0 {
			b = append(b, 5<<3, byte(m.Attempts))
		}
		if m.LastErrorCode != 0 {
			b = append(b, 6<<3, byte(m.LastErrorCode))
		}
		b = appendShort(b, 7<<3|2, m.LastErrorKind)
		b = appendShort(b, 8<<3|2, m.ExternalNodeID)
		b = appendShort(b, 9<<3|2, m.AccessMode)
		return appendShort(b, 10<<3|2, m.AttachmentMode)
	}
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
		err = v.merge(&d, d.base)
	}
	if err != nil {
		return malformed("ClaimView", err)
	}
	*m = v
	return nil
}

func (m *ClaimView) merge(d *decoder, b []byte) error {
	// Fast path (see "decoding helpers"): the fields in number order.
	if v, n := shortBytes(b, 1<<3|2); n > 0 {
		m.AllocID = d.str(v)
		b = b[n:]
		if len(b) == 0 {
			goto done
		}
	}
	if v, n := shortBytes(b, 2<<3|2); n > 0 {
		m.NodeID = d.str(v)
		b = b[n:]
		if len(b) == 0 {
			goto done
		}
	}
	if v, n := shortBytes(b, 3<<3|2); n > 0 {
		m.Mode = d.str(v)
		b = b[n:]
		if len(b) == 0 {
			goto done
		}
	}
	if v, n := shortBytes(b, 4<<3|2); n > 0 {
		m.State = d.str(v)
		b = b[n:]
		if len(b) == 0 {
			goto done
		}
	}
	if x, n := shortVarint(b, 5<<3); n > 0 {
		m.Attempts = uint32(x)
		b = b[n:]
		if len(b) == 0 {
			goto done
		}
	}
	if x, n := shortVarint(b, 6<<3); n > 0 {
		m.LastErrorCode = uint32(x)
		b = b[n:]
		if len(b) == 0 {
			goto done
		}
	}
	if v, n := shortBytes(b, 7<<3|2); n > 0 {
		m.LastErrorKind = d.str(v)
		b = b[n:]
		if len(b) == 0 {
			goto done
		}
	}
	if v, n := shortBytes(b, 8<<3|2); n > 0 {
		m.ExternalNodeID = d.str(v)
		b = b[n:]
		if len(b) == 0 {
			goto done
		}
	}
	if v, n := shortBytes(b, 9<<3|2); n > 0 {
		m.AccessMode = d.str(v)
		b = b[n:]
		if len(b) == 0 {
			goto done
		}
	}
	if v, n := shortBytes(b, 10<<3|2); n > 0 {
		m.AttachmentMode = d.str(v)
		b = b[n:]
		if len(b) == 0 {
			goto done
		}
	}
	for len(b) > 0 {
		// The general loop, for what the fast path left: the tag and the
		// value, inline for one-byte tags, lengths and varints.
		c := b[0]
		num, typ, n := protowire.Number(c>>3), protowire.Type(c&7), 1
		if c-8 >= 0x78 {
			if num, typ, n = protowire.ConsumeTag(b); n < 0 {
				return tagError(n)
			}
		}
		b = b[n:]
		var v []byte
		var x uint64
		switch typ {
		case protowire.BytesType:
			if len(b) > 0 && b[0] < 0x80 && int(b[0]) < len(b) {
				v, n = b[1:1+b[0]], 1+int(b[0])
			} else if v, n = protowire.ConsumeBytes(b); n < 0 {
				return valueError(num, n)
			}
		case protowire.VarintType:
			if len(b) > 0 && b[0] < 0x80 {
				x, n = uint64(b[0]), 1
			} else if x, n = protowire.ConsumeVarint(b); n < 0 {
				return valueError(num, n)
			}
		}
		var err error
		switch num {
		case 1:
			err = d.setString(typ, v, &m.AllocID)
		case 2:
			err = d.setString(typ, v, &m.NodeID)
		case 3:
			err = d.setString(typ, v, &m.Mode)
		case 4:
			err = d.setString(typ, v, &m.State)
		case 5:
			err = setUint32(typ, x, &m.Attempts)
		case 6:
			err = setUint32(typ, x, &m.LastErrorCode)
		case 7:
			err = d.setString(typ, v, &m.LastErrorKind)
		case 8:
			err = d.setString(typ, v, &m.ExternalNodeID)
		case 9:
			err = d.setString(typ, v, &m.AccessMode)
		case 10:
			err = d.setString(typ, v, &m.AttachmentMode)
		default:
			if typ != protowire.BytesType && typ != protowire.VarintType {
				n, err = skipField(num, typ, b)
			}
		}
		if err != nil {
			return fieldError(num, typ, err)
		}
		b = b[n:]
	}
done:
	return nil
}

// ---- AllocView ----

// MarshalAppend appends the encoding of m to b.
func (m *AllocView) MarshalAppend(b []byte) []byte {
	if len(m.ID)|len(m.ClientStatus) < 0x80 {
		b = appendShort(b, 1<<3|2, m.ID)
		b = appendShort(b, 2<<3|2, m.ClientStatus)
		if m.TerminalAgeMs != 0 {
			b = protowire.AppendVarint(append(b, 3<<3), uint64(m.TerminalAgeMs))
		}
		return b
	}
	b = appendString(b, 1, m.ID)
	b = appendString(b, 2, m.ClientStatus)
	return appendVarint(b, 3, uint64(m.TerminalAgeMs))
}

// Unmarshal replaces m with the message encoded in b.
func (m *AllocView) Unmarshal(b []byte) error {
	d, err := newDecoder(b)
	var v AllocView
	if err == nil {
		err = v.merge(&d, d.base)
	}
	if err != nil {
		return malformed("AllocView", err)
	}
	*m = v
	return nil
}

func (m *AllocView) merge(d *decoder, b []byte) error {
	// Fast path (see "decoding helpers"): the fields in number order.
	if v, n := shortBytes(b, 1<<3|2); n > 0 {
		m.ID = d.str(v)
		b = b[n:]
		if len(b) == 0 {
			goto done
		}
	}
	if v, n := shortBytes(b, 2<<3|2); n > 0 {
		m.ClientStatus = d.str(v)
		b = b[n:]
		if len(b) == 0 {
			goto done
		}
	}
	if len(b) > 1 && b[0] == 3<<3 { // a time or age in ms: several bytes
		if x, n := protowire.ConsumeVarint(b[1:]); n > 0 {
			m.TerminalAgeMs = int64(x)
			b = b[1+n:]
			if len(b) == 0 {
				goto done
			}
		}
	}
	for len(b) > 0 {
		// The general loop, for what the fast path left: the tag and the
		// value, inline for one-byte tags, lengths and varints.
		c := b[0]
		num, typ, n := protowire.Number(c>>3), protowire.Type(c&7), 1
		if c-8 >= 0x78 {
			if num, typ, n = protowire.ConsumeTag(b); n < 0 {
				return tagError(n)
			}
		}
		b = b[n:]
		var v []byte
		var x uint64
		switch typ {
		case protowire.BytesType:
			if len(b) > 0 && b[0] < 0x80 && int(b[0]) < len(b) {
				v, n = b[1:1+b[0]], 1+int(b[0])
			} else if v, n = protowire.ConsumeBytes(b); n < 0 {
				return valueError(num, n)
			}
		case protowire.VarintType:
			if len(b) > 0 && b[0] < 0x80 {
				x, n = uint64(b[0]), 1
			} else if x, n = protowire.ConsumeVarint(b); n < 0 {
				return valueError(num, n)
			}
		}
		var err error
		switch num {
		case 1:
			err = d.setString(typ, v, &m.ID)
		case 2:
			err = d.setString(typ, v, &m.ClientStatus)
		case 3:
			err = setInt64(typ, x, &m.TerminalAgeMs)
		default:
			if typ != protowire.BytesType && typ != protowire.VarintType {
				n, err = skipField(num, typ, b)
			}
		}
		if err != nil {
			return fieldError(num, typ, err)
		}
		b = b[n:]
	}
done:
	return nil
}

// ---- NodeView ----

// MarshalAppend appends the encoding of m to b.
func (m *NodeView) MarshalAppend(b []byte) []byte {
	if len(m.ID)|len(m.Status)|len(m.ExternalID) < 0x80 && len(m.Meta) == 0 {
		b = appendShort(b, 1<<3|2, m.ID)
		b = appendShort(b, 2<<3|2, m.Status)
		if m.LastSeenAgeMs != 0 {
			b = protowire.AppendVarint(append(b, 3<<3), uint64(m.LastSeenAgeMs))
		}
		return appendShort(b, 5<<3|2, m.ExternalID)
	}
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
		err = v.merge(&d, d.base)
	}
	if err != nil {
		return malformed("NodeView", err)
	}
	*m = v
	return nil
}

func (m *NodeView) merge(d *decoder, b []byte) error {
	// Fast path (see "decoding helpers"): the fields in number order.
	if v, n := shortBytes(b, 1<<3|2); n > 0 {
		m.ID = d.str(v)
		b = b[n:]
		if len(b) == 0 {
			goto done
		}
	}
	if v, n := shortBytes(b, 2<<3|2); n > 0 {
		m.Status = d.str(v)
		b = b[n:]
		if len(b) == 0 {
			goto done
		}
	}
	if len(b) > 1 && b[0] == 3<<3 { // a time or age in ms: several bytes
		if x, n := protowire.ConsumeVarint(b[1:]); n > 0 {
			m.LastSeenAgeMs = int64(x)
			b = b[1+n:]
			if len(b) == 0 {
				goto done
			}
		}
	}
	for {
		v, n := shortBytes(b, 4<<3|2)
		if n == 0 {
			break
		}
		if err := d.addMapEntry(protowire.BytesType, v, &m.Meta); err != nil {
			return fieldError(4, protowire.BytesType, err)
		}
		b = b[n:]
		if len(b) == 0 {
			goto done
		}
	}
	if v, n := shortBytes(b, 5<<3|2); n > 0 {
		m.ExternalID = d.str(v)
		b = b[n:]
		if len(b) == 0 {
			goto done
		}
	}
	for len(b) > 0 {
		// The general loop, for what the fast path left: the tag and the
		// value, inline for one-byte tags, lengths and varints.
		c := b[0]
		num, typ, n := protowire.Number(c>>3), protowire.Type(c&7), 1
		if c-8 >= 0x78 {
			if num, typ, n = protowire.ConsumeTag(b); n < 0 {
				return tagError(n)
			}
		}
		b = b[n:]
		var v []byte
		var x uint64
		switch typ {
		case protowire.BytesType:
			if len(b) > 0 && b[0] < 0x80 && int(b[0]) < len(b) {
				v, n = b[1:1+b[0]], 1+int(b[0])
			} else if v, n = protowire.ConsumeBytes(b); n < 0 {
				return valueError(num, n)
			}
		case protowire.VarintType:
			if len(b) > 0 && b[0] < 0x80 {
				x, n = uint64(b[0]), 1
			} else if x, n = protowire.ConsumeVarint(b); n < 0 {
				return valueError(num, n)
			}
		}
		var err error
		switch num {
		case 1:
			err = d.setString(typ, v, &m.ID)
		case 2:
			err = d.setString(typ, v, &m.Status)
		case 3:
			err = setInt64(typ, x, &m.LastSeenAgeMs)
		case 4:
			err = d.addMapEntry(typ, v, &m.Meta)
		case 5:
			err = d.setString(typ, v, &m.ExternalID)
		default:
			if typ != protowire.BytesType && typ != protowire.VarintType {
				n, err = skipField(num, typ, b)
			}
		}
		if err != nil {
			return fieldError(num, typ, err)
		}
		b = b[n:]
	}
done:
	return nil
}

// ---- PolicyRequest ----

// MarshalAppend appends the encoding of m to b.
func (m *PolicyRequest) MarshalAppend(b []byte) []byte {
	b = appendVarint(b, 1, uint64(m.NowUnixMs))
	b = openNested(b, 2)
	start := len(b)
	b = closeNestedOmitEmpty(m.Volume.MarshalAppend(b), start)
	for i := range m.Claims {
		b = openNested(b, 3)
		start := len(b)
		b = closeNested(m.Claims[i].MarshalAppend(b), start)
	}
	for i := range m.Allocs {
		b = openNested(b, 4)
		start := len(b)
		b = closeNested(m.Allocs[i].MarshalAppend(b), start)
	}
	for i := range m.Nodes {
		b = openNested(b, 5)
		start := len(b)
		b = closeNested(m.Nodes[i].MarshalAppend(b), start)
	}
	return b
}

// Unmarshal replaces m with the message encoded in b.
func (m *PolicyRequest) Unmarshal(b []byte) error {
	d, err := newDecoder(b)
	var v PolicyRequest
	if err == nil {
		err = v.merge(&d, d.base)
	}
	if err != nil {
		return malformed("PolicyRequest", err)
	}
	*m = v
	return nil
}

// UnmarshalReusing is Unmarshal into m's own repeated fields: their
// backing arrays are reused when large enough, so a guest that decodes
// every call into one PolicyRequest allocates only the request's string
// copy, not its claims, allocs and nodes (each allocation costs a Go guest
// about 20 exits, and its garbage GC cycles and yields: ABI.md section 12).
// Whatever m held before, slices included, is overwritten: callers must
// not keep m's previous contents. The strings stay valid (they are a copy
// of b). On an error m is left empty.
func (m *PolicyRequest) UnmarshalReusing(b []byte) error {
	clear(m.Claims[:cap(m.Claims)]) // drop the old strings for the GC
	clear(m.Allocs[:cap(m.Allocs)])
	clear(m.Nodes[:cap(m.Nodes)])
	return m.unmarshalReusing(newDecoder(b))
}

// UnmarshalBorrowing is UnmarshalReusing without the string copy: m's
// strings alias b itself, so a request without maps decodes with no
// allocation at all once m's slices are large enough (the Go guest SDK's
// HandleReleaseInto path, issue 17). The caller must not change b while
// any of m's strings is in use; the SDK hands such a request to a handler
// only for the duration of the call, before the host writes the next
// request into the same buffer. Unlike UnmarshalReusing it leaves the
// items past the new lengths as they were (each item decoded replaces the
// old one whole, so nothing of them shows): their strings point into the
// caller's own buffer, which stays alive anyway, and clearing them costs a
// Go guest two runtime calls per slice.
func (m *PolicyRequest) UnmarshalBorrowing(b []byte) error {
	return m.unmarshalReusing(borrowingDecoder(b))
}

// unmarshalReusing is UnmarshalReusing and UnmarshalBorrowing over d.
func (m *PolicyRequest) unmarshalReusing(d decoder, err error) error {
	claims, allocs, nodes := m.Claims[:0], m.Allocs[:0], m.Nodes[:0]
	*m = PolicyRequest{}
	if err == nil {
		m.Claims, m.Allocs, m.Nodes = claims, allocs, nodes
		err = m.merge(&d, d.base)
	}
	if err != nil {
		*m = PolicyRequest{}
		return malformed("PolicyRequest", err)
	}
	return nil
}

func (m *PolicyRequest) merge(d *decoder, b []byte) error {
	// Fast path (see "decoding helpers"): the fields in number order, each
	// item with its whole-message decoder (codec_items.go). Only the first
	// Volume can be decoded fresh: nothing of m is set before it.
	if len(b) > 1 && b[0] == 1<<3 { // a time or age in ms: several bytes
		if x, n := protowire.ConsumeVarint(b[1:]); n > 0 {
			m.NowUnixMs = int64(x)
			b = b[1+n:]
			if len(b) == 0 {
				goto done
			}
		}
	}
	if v, n := itemBytes(b, 2<<3|2); n > 0 {
		if err := m.Volume.decodeFresh(d, v); err != nil {
			return fieldError(2, protowire.BytesType, err)
		}
		b = b[n:]
		if len(b) == 0 {
			goto done
		}
	}
	if m.Claims == nil && m.Allocs == nil && m.Nodes == nil {
		// A fresh request (or the first into a reused one) is sized once
		// here; a reused one keeps its slices and grows them only for a
		// request with more items than any before (counting the fields
		// again costs a guest a loop over the whole message).
		m.presize(b)
	}
	{
		// The items are appended to locals and stored once: every store
		// of a slice header into m is a write barrier test, a jump in a
		// Go guest.
		claims, allocs, nodes := m.Claims, m.Allocs, m.Nodes
		for len(claims) < MaxRepeated && len(b) > 2 && b[0] == 3<<3|2 {
			// itemBytes, written out: its not-found result merged with
			// the found one costs a jump per item in a Go guest, a
			// loop exit none.
			c1, c2 := int(b[1]), int(b[2])
			two := c1 >> 7
			if c1&c2 >= 0x80 {
				break
			}
			n := 2 + two + (c1&0x7f | c2<<7&-two)
			if n > len(b) {
				break
			}
			v := b[2+two : n]
			k := len(claims)
			if k == cap(claims) {
				claims = slices.Grow(claims, 1)
			}
			claims = claims[:k+1]
			if err := claims[k].decodeFresh(d, v); err != nil {
				return fieldError(3, protowire.BytesType, itemError(k, err))
			}
			b = b[n:]
		}
		for len(allocs) < MaxRepeated && len(b) > 2 && b[0] == 4<<3|2 {
			// itemBytes, written out: its not-found result merged with
			// the found one costs a jump per item in a Go guest, a
			// loop exit none.
			c1, c2 := int(b[1]), int(b[2])
			two := c1 >> 7
			if c1&c2 >= 0x80 {
				break
			}
			n := 2 + two + (c1&0x7f | c2<<7&-two)
			if n > len(b) {
				break
			}
			v := b[2+two : n]
			k := len(allocs)
			if k == cap(allocs) {
				allocs = slices.Grow(allocs, 1)
			}
			allocs = allocs[:k+1]
			if err := allocs[k].decodeFresh(d, v); err != nil {
				return fieldError(4, protowire.BytesType, itemError(k, err))
			}
			b = b[n:]
		}
		for len(nodes) < MaxRepeated && len(b) > 2 && b[0] == 5<<3|2 {
			// itemBytes, written out: its not-found result merged with
			// the found one costs a jump per item in a Go guest, a
			// loop exit none.
			c1, c2 := int(b[1]), int(b[2])
			two := c1 >> 7
			if c1&c2 >= 0x80 {
				break
			}
			n := 2 + two + (c1&0x7f | c2<<7&-two)
			if n > len(b) {
				break
			}
			v := b[2+two : n]
			k := len(nodes)
			if k == cap(nodes) {
				nodes = slices.Grow(nodes, 1)
			}
			nodes = nodes[:k+1]
			if err := nodes[k].decodeFresh(d, v); err != nil {
				return fieldError(5, protowire.BytesType, itemError(k, err))
			}
			b = b[n:]
		}
		m.Claims, m.Allocs, m.Nodes = claims, allocs, nodes
	}
	if len(b) == 0 {
		goto done
	}
	for len(b) > 0 {
		// The general loop, for what the fast path left: the tag and the
		// value, inline for one-byte tags, lengths and varints.
		c := b[0]
		num, typ, n := protowire.Number(c>>3), protowire.Type(c&7), 1
		if c-8 >= 0x78 {
			if num, typ, n = protowire.ConsumeTag(b); n < 0 {
				return tagError(n)
			}
		}
		b = b[n:]
		var v []byte
		var x uint64
		switch typ {
		case protowire.BytesType:
			if len(b) > 0 && b[0] < 0x80 && int(b[0]) < len(b) {
				v, n = b[1:1+b[0]], 1+int(b[0])
			} else if v, n = protowire.ConsumeBytes(b); n < 0 {
				return valueError(num, n)
			}
		case protowire.VarintType:
			if len(b) > 0 && b[0] < 0x80 {
				x, n = uint64(b[0]), 1
			} else if x, n = protowire.ConsumeVarint(b); n < 0 {
				return valueError(num, n)
			}
		}
		var err error
		switch num {
		case 1:
			err = setInt64(typ, x, &m.NowUnixMs)
		case 2:
			if err = wantBytes(typ); err == nil {
				err = m.Volume.merge(d, v)
			}
		case 3:
			if err = checkItem(typ, len(m.Claims)); err == nil {
				m.Claims = append(m.Claims, ClaimView{})
				if err = m.Claims[len(m.Claims)-1].merge(d, v); err != nil {
					err = itemError(len(m.Claims)-1, err)
				}
			}
		case 4:
			if err = checkItem(typ, len(m.Allocs)); err == nil {
				m.Allocs = append(m.Allocs, AllocView{})
				if err = m.Allocs[len(m.Allocs)-1].merge(d, v); err != nil {
					err = itemError(len(m.Allocs)-1, err)
				}
			}
		case 5:
			if err = checkItem(typ, len(m.Nodes)); err == nil {
				m.Nodes = append(m.Nodes, NodeView{})
				if err = m.Nodes[len(m.Nodes)-1].merge(d, v); err != nil {
					err = itemError(len(m.Nodes)-1, err)
				}
			}
		default:
			if typ != protowire.BytesType && typ != protowire.VarintType {
				n, err = skipField(num, typ, b)
			}
		}
		if err != nil {
			return fieldError(num, typ, err)
		}
		b = b[n:]
	}
done:
	return nil
}

// presize sizes the repeated fields once for the items in b (what the
// singular fields left), instead of growing them. The usual request, one
// claim, gets one allocation for all three: each allocation costs a Go guest
// about 20 exits (ABI.md section 12).
func (m *PolicyRequest) presize(b []byte) {
	c := countFields(b)
	if c[3]|c[4]|c[5] != 1 || m.Claims != nil || m.Allocs != nil || m.Nodes != nil {
		presize(&m.Claims, c[3])
		presize(&m.Allocs, c[4])
		presize(&m.Nodes, c[5])
		return
	}
	one := new(struct {
		claims [1]ClaimView
		allocs [1]AllocView
		nodes  [1]NodeView
	})
	if c[3] > 0 {
		m.Claims = one.claims[:0:1]
	}
	if c[4] > 0 {
		m.Allocs = one.allocs[:0:1]
	}
	if c[5] > 0 {
		m.Nodes = one.nodes[:0:1]
	}
}

// ---- Decision ----

// MarshalAppend appends the encoding of m to b.
func (m *Decision) MarshalAppend(b []byte) []byte {
	if n, r := len(m.AllocID), len(m.Reason); uint(n-1) < 0x7f && uint(r-1) < 0x7f && m.Action-1 < 0x7f && m.RetryAfterMs == 0 {
		// The usual decision (ID, action and reason set and short, no
		// delay) without a call or a branch per field: a guest encodes
		// one per claim.
		b = append(b, 1<<3|byte(protowire.BytesType), byte(n))
		b = append(b, m.AllocID...)
		b = append(b, 2<<3|byte(protowire.VarintType), byte(m.Action), 4<<3|byte(protowire.BytesType), byte(r))
		return append(b, m.Reason...)
	}
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
		err = v.merge(&d, d.base)
	}
	if err != nil {
		return malformed("Decision", err)
	}
	*m = v
	return nil
}

func (m *Decision) merge(d *decoder, b []byte) error {
	// Fast path (see "decoding helpers"): the fields in number order.
	if v, n := shortBytes(b, 1<<3|2); n > 0 {
		m.AllocID = d.str(v)
		b = b[n:]
		if len(b) == 0 {
			goto done
		}
	}
	if x, n := shortVarint(b, 2<<3); n > 0 {
		m.Action = Action(uint32(x))
		b = b[n:]
		if len(b) == 0 {
			goto done
		}
	}
	if len(b) > 1 && b[0] == 3<<3 { // a time or age in ms: several bytes
		if x, n := protowire.ConsumeVarint(b[1:]); n > 0 {
			m.RetryAfterMs = int64(x)
			b = b[1+n:]
			if len(b) == 0 {
				goto done
			}
		}
	}
	if v, n := shortBytes(b, 4<<3|2); n > 0 {
		m.Reason = d.str(v)
		b = b[n:]
		if len(b) == 0 {
			goto done
		}
	}
	for len(b) > 0 {
		// The general loop, for what the fast path left: the tag and the
		// value, inline for one-byte tags, lengths and varints.
		c := b[0]
		num, typ, n := protowire.Number(c>>3), protowire.Type(c&7), 1
		if c-8 >= 0x78 {
			if num, typ, n = protowire.ConsumeTag(b); n < 0 {
				return tagError(n)
			}
		}
		b = b[n:]
		var v []byte
		var x uint64
		switch typ {
		case protowire.BytesType:
			if len(b) > 0 && b[0] < 0x80 && int(b[0]) < len(b) {
				v, n = b[1:1+b[0]], 1+int(b[0])
			} else if v, n = protowire.ConsumeBytes(b); n < 0 {
				return valueError(num, n)
			}
		case protowire.VarintType:
			if len(b) > 0 && b[0] < 0x80 {
				x, n = uint64(b[0]), 1
			} else if x, n = protowire.ConsumeVarint(b); n < 0 {
				return valueError(num, n)
			}
		}
		var err error
		switch num {
		case 1:
			err = d.setString(typ, v, &m.AllocID)
		case 2:
			err = setUint32(typ, x, (*uint32)(&m.Action))
		case 3:
			err = setInt64(typ, x, &m.RetryAfterMs)
		case 4:
			err = d.setString(typ, v, &m.Reason)
		default:
			if typ != protowire.BytesType && typ != protowire.VarintType {
				n, err = skipField(num, typ, b)
			}
		}
		if err != nil {
			return fieldError(num, typ, err)
		}
		b = b[n:]
	}
done:
	return nil
}

// ---- PolicyResponse ----

// MarshalAppend appends the encoding of m to b.
func (m *PolicyResponse) MarshalAppend(b []byte) []byte {
	for i := range m.Decisions {
		if d := &m.Decisions[i]; d.RetryAfterMs == 0 {
			// The usual decision (see Decision.MarshalAppend), inline with
			// its field header: a Go guest encodes one per claim, and a
			// call costs it more than these few appends.
			if n, r := len(d.AllocID), len(d.Reason); uint(n-1) < 0x7f && uint(r-1) < 0x7f && d.Action-1 < 0x7f && n+r < 0x80-6 {
				b = append(b, 1<<3|byte(protowire.BytesType), byte(6+n+r), 1<<3|byte(protowire.BytesType), byte(n))
				b = append(b, d.AllocID...)
				b = append(b, 2<<3|byte(protowire.VarintType), byte(d.Action), 4<<3|byte(protowire.BytesType), byte(r))
				b = append(b, d.Reason...)
				continue
			}
		}
		b = openNested(b, 1)
		start := len(b)
		b = m.Decisions[i].MarshalAppend(b)
		// closeNested by hand: a guest encodes a decision per claim, and
		// closeNested is just over the inlining budget.
		if n := len(b) - start; n < 0x80 {
			b[start-1] = byte(n)
		} else {
			b = moveNested(b, start)
		}
	}
	return appendString(b, 15, m.Error)
}

// Unmarshal replaces m with the message encoded in b.
func (m *PolicyResponse) Unmarshal(b []byte) error {
	d, err := newDecoder(b)
	var v PolicyResponse
	if err == nil {
		err = v.merge(&d, d.base)
	}
	if err != nil {
		return malformed("PolicyResponse", err)
	}
	*m = v
	return nil
}

func (m *PolicyResponse) merge(d *decoder, b []byte) error {
	presize(&m.Decisions, countFields(b)[1])
	// Fast path (see "decoding helpers"): the fields in number order.
	for len(m.Decisions) < MaxRepeated {
		v, n := shortBytes(b, 1<<3|2)
		if n == 0 {
			break
		}
		m.Decisions = append(m.Decisions, Decision{})
		if err := m.Decisions[len(m.Decisions)-1].decodeFresh(d, v); err != nil {
			return fieldError(1, protowire.BytesType, itemError(len(m.Decisions)-1, err))
		}
		b = b[n:]
		if len(b) == 0 {
			goto done
		}
	}
	if v, n := shortBytes(b, 15<<3|2); n > 0 {
		m.Error = d.str(v)
		b = b[n:]
		if len(b) == 0 {
			goto done
		}
	}
	for len(b) > 0 {
		// The general loop, for what the fast path left: the tag and the
		// value, inline for one-byte tags, lengths and varints.
		c := b[0]
		num, typ, n := protowire.Number(c>>3), protowire.Type(c&7), 1
		if c-8 >= 0x78 {
			if num, typ, n = protowire.ConsumeTag(b); n < 0 {
				return tagError(n)
			}
		}
		b = b[n:]
		var v []byte
		switch typ {
		case protowire.BytesType:
			if len(b) > 0 && b[0] < 0x80 && int(b[0]) < len(b) {
				v, n = b[1:1+b[0]], 1+int(b[0])
			} else if v, n = protowire.ConsumeBytes(b); n < 0 {
				return valueError(num, n)
			}
		case protowire.VarintType:
			if len(b) > 0 && b[0] < 0x80 {
				n = 1
			} else if _, n = protowire.ConsumeVarint(b); n < 0 {
				return valueError(num, n)
			}
		}
		var err error
		switch num {
		case 1:
			if err = checkItem(typ, len(m.Decisions)); err == nil {
				m.Decisions = append(m.Decisions, Decision{})
				if err = m.Decisions[len(m.Decisions)-1].merge(d, v); err != nil {
					err = itemError(len(m.Decisions)-1, err)
				}
			}
		case 15:
			err = d.setString(typ, v, &m.Error)
		default:
			if typ != protowire.BytesType && typ != protowire.VarintType {
				n, err = skipField(num, typ, b)
			}
		}
		if err != nil {
			return fieldError(num, typ, err)
		}
		b = b[n:]
	}
done:
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
		err = v.merge(&d, d.base)
	}
	if err != nil {
		return malformed("PluginView", err)
	}
	*m = v
	return nil
}

func (m *PluginView) merge(d *decoder, b []byte) error {
	// Fast path (see "decoding helpers"): the fields in number order.
	if v, n := shortBytes(b, 1<<3|2); n > 0 {
		m.ID = d.str(v)
		b = b[n:]
		if len(b) == 0 {
			goto done
		}
	}
	if v, n := shortBytes(b, 2<<3|2); n > 0 {
		m.Provider = d.str(v)
		b = b[n:]
		if len(b) == 0 {
			goto done
		}
	}
	if x, n := shortVarint(b, 3<<3); n > 0 {
		m.PublishUnpublish = x != 0
		b = b[n:]
		if len(b) == 0 {
			goto done
		}
	}
	if x, n := shortVarint(b, 4<<3); n > 0 {
		m.StageUnstage = x != 0
		b = b[n:]
		if len(b) == 0 {
			goto done
		}
	}
	for len(b) > 0 {
		// The general loop, for what the fast path left: the tag and the
		// value, inline for one-byte tags, lengths and varints.
		c := b[0]
		num, typ, n := protowire.Number(c>>3), protowire.Type(c&7), 1
		if c-8 >= 0x78 {
			if num, typ, n = protowire.ConsumeTag(b); n < 0 {
				return tagError(n)
			}
		}
		b = b[n:]
		var v []byte
		var x uint64
		switch typ {
		case protowire.BytesType:
			if len(b) > 0 && b[0] < 0x80 && int(b[0]) < len(b) {
				v, n = b[1:1+b[0]], 1+int(b[0])
			} else if v, n = protowire.ConsumeBytes(b); n < 0 {
				return valueError(num, n)
			}
		case protowire.VarintType:
			if len(b) > 0 && b[0] < 0x80 {
				x, n = uint64(b[0]), 1
			} else if x, n = protowire.ConsumeVarint(b); n < 0 {
				return valueError(num, n)
			}
		}
		var err error
		switch num {
		case 1:
			err = d.setString(typ, v, &m.ID)
		case 2:
			err = d.setString(typ, v, &m.Provider)
		case 3:
			err = setBool(typ, x, &m.PublishUnpublish)
		case 4:
			err = setBool(typ, x, &m.StageUnstage)
		default:
			if typ != protowire.BytesType && typ != protowire.VarintType {
				n, err = skipField(num, typ, b)
			}
		}
		if err != nil {
			return fieldError(num, typ, err)
		}
		b = b[n:]
	}
done:
	return nil
}

// ---- AdapterRequest ----

// MarshalAppend appends the encoding of m to b.
func (m *AdapterRequest) MarshalAppend(b []byte) []byte {
	b = appendString(b, 1, m.Step)
	b = openNested(b, 2)
	start := len(b)
	b = closeNestedOmitEmpty(m.Claim.MarshalAppend(b), start)
	b = openNested(b, 3)
	start = len(b)
	b = closeNestedOmitEmpty(m.Volume.MarshalAppend(b), start)
	b = openNested(b, 4)
	start = len(b)
	b = closeNestedOmitEmpty(m.Node.MarshalAppend(b), start)
	b = openNested(b, 5)
	start = len(b)
	b = closeNestedOmitEmpty(m.Plugin.MarshalAppend(b), start)
	return appendVarint(b, 6, uint64(m.NowUnixMs))
}

// Unmarshal replaces m with the message encoded in b.
func (m *AdapterRequest) Unmarshal(b []byte) error {
	d, err := newDecoder(b)
	var v AdapterRequest
	if err == nil {
		err = v.merge(&d, d.base)
	}
	if err != nil {
		return malformed("AdapterRequest", err)
	}
	*m = v
	return nil
}

func (m *AdapterRequest) merge(d *decoder, b []byte) error {
	// Fast path (see "decoding helpers"): the fields in number order.
	if v, n := shortBytes(b, 1<<3|2); n > 0 {
		m.Step = d.str(v)
		b = b[n:]
		if len(b) == 0 {
			goto done
		}
	}
	if v, n := shortBytes(b, 2<<3|2); n > 0 {
		if err := m.Claim.merge(d, v); err != nil {
			return fieldError(2, protowire.BytesType, err)
		}
		b = b[n:]
		if len(b) == 0 {
			goto done
		}
	}
	if v, n := shortBytes(b, 3<<3|2); n > 0 {
		if err := m.Volume.merge(d, v); err != nil {
			return fieldError(3, protowire.BytesType, err)
		}
		b = b[n:]
		if len(b) == 0 {
			goto done
		}
	}
	if v, n := shortBytes(b, 4<<3|2); n > 0 {
		if err := m.Node.merge(d, v); err != nil {
			return fieldError(4, protowire.BytesType, err)
		}
		b = b[n:]
		if len(b) == 0 {
			goto done
		}
	}
	if v, n := shortBytes(b, 5<<3|2); n > 0 {
		if err := m.Plugin.merge(d, v); err != nil {
			return fieldError(5, protowire.BytesType, err)
		}
		b = b[n:]
		if len(b) == 0 {
			goto done
		}
	}
	if len(b) > 1 && b[0] == 6<<3 { // a time or age in ms: several bytes
		if x, n := protowire.ConsumeVarint(b[1:]); n > 0 {
			m.NowUnixMs = int64(x)
			b = b[1+n:]
			if len(b) == 0 {
				goto done
			}
		}
	}
	for len(b) > 0 {
		// The general loop, for what the fast path left: the tag and the
		// value, inline for one-byte tags, lengths and varints.
		c := b[0]
		num, typ, n := protowire.Number(c>>3), protowire.Type(c&7), 1
		if c-8 >= 0x78 {
			if num, typ, n = protowire.ConsumeTag(b); n < 0 {
				return tagError(n)
			}
		}
		b = b[n:]
		var v []byte
		var x uint64
		switch typ {
		case protowire.BytesType:
			if len(b) > 0 && b[0] < 0x80 && int(b[0]) < len(b) {
				v, n = b[1:1+b[0]], 1+int(b[0])
			} else if v, n = protowire.ConsumeBytes(b); n < 0 {
				return valueError(num, n)
			}
		case protowire.VarintType:
			if len(b) > 0 && b[0] < 0x80 {
				x, n = uint64(b[0]), 1
			} else if x, n = protowire.ConsumeVarint(b); n < 0 {
				return valueError(num, n)
			}
		}
		var err error
		switch num {
		case 1:
			err = d.setString(typ, v, &m.Step)
		case 2:
			if err = wantBytes(typ); err == nil {
				err = m.Claim.merge(d, v)
			}
		case 3:
			if err = wantBytes(typ); err == nil {
				err = m.Volume.merge(d, v)
			}
		case 4:
			if err = wantBytes(typ); err == nil {
				err = m.Node.merge(d, v)
			}
		case 5:
			if err = wantBytes(typ); err == nil {
				err = m.Plugin.merge(d, v)
			}
		case 6:
			err = setInt64(typ, x, &m.NowUnixMs)
		default:
			if typ != protowire.BytesType && typ != protowire.VarintType {
				n, err = skipField(num, typ, b)
			}
		}
		if err != nil {
			return fieldError(num, typ, err)
		}
		b = b[n:]
	}
done:
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
		err = v.merge(&d, d.base)
	}
	if err != nil {
		return malformed("AdapterResponse", err)
	}
	*m = v
	return nil
}

func (m *AdapterResponse) merge(d *decoder, b []byte) error {
	// Fast path (see "decoding helpers"): the fields in number order.
	if v, n := shortBytes(b, 1<<3|2); n > 0 {
		m.VolumeID = d.str(v)
		b = b[n:]
		if len(b) == 0 {
			goto done
		}
	}
	if v, n := shortBytes(b, 2<<3|2); n > 0 {
		m.NodeID = d.str(v)
		b = b[n:]
		if len(b) == 0 {
			goto done
		}
	}
	for {
		v, n := shortBytes(b, 4<<3|2)
		if n == 0 {
			break
		}
		if err := d.addMapEntry(protowire.BytesType, v, &m.VolumeContext); err != nil {
			return fieldError(4, protowire.BytesType, err)
		}
		b = b[n:]
		if len(b) == 0 {
			goto done
		}
	}
	if v, n := shortBytes(b, 15<<3|2); n > 0 {
		m.Error = d.str(v)
		b = b[n:]
		if len(b) == 0 {
			goto done
		}
	}
	for len(b) > 0 {
		// The general loop, for what the fast path left: the tag and the
		// value, inline for one-byte tags, lengths and varints.
		c := b[0]
		num, typ, n := protowire.Number(c>>3), protowire.Type(c&7), 1
		if c-8 >= 0x78 {
			if num, typ, n = protowire.ConsumeTag(b); n < 0 {
				return tagError(n)
			}
		}
		b = b[n:]
		var v []byte
		switch typ {
		case protowire.BytesType:
			if len(b) > 0 && b[0] < 0x80 && int(b[0]) < len(b) {
				v, n = b[1:1+b[0]], 1+int(b[0])
			} else if v, n = protowire.ConsumeBytes(b); n < 0 {
				return valueError(num, n)
			}
		case protowire.VarintType:
			if len(b) > 0 && b[0] < 0x80 {
				n = 1
			} else if _, n = protowire.ConsumeVarint(b); n < 0 {
				return valueError(num, n)
			}
		}
		var err error
		switch num {
		case 1:
			err = d.setString(typ, v, &m.VolumeID)
		case 2:
			err = d.setString(typ, v, &m.NodeID)
		case 3:
			err = d.addString(typ, v, &m.SecretKeys)
		case 4:
			err = d.addMapEntry(typ, v, &m.VolumeContext)
		case 15:
			err = d.setString(typ, v, &m.Error)
		default:
			if typ != protowire.BytesType && typ != protowire.VarintType {
				n, err = skipField(num, typ, b)
			}
		}
		if err != nil {
			return fieldError(num, typ, err)
		}
		b = b[n:]
	}
done:
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
		err = v.merge(&d, d.base)
	}
	if err != nil {
		return malformed("ClassifyRequest", err)
	}
	*m = v
	return nil
}

func (m *ClassifyRequest) merge(d *decoder, b []byte) error {
	// Fast path (see "decoding helpers"): the fields in number order.
	if v, n := shortBytes(b, 1<<3|2); n > 0 {
		m.Step = d.str(v)
		b = b[n:]
		if len(b) == 0 {
			goto done
		}
	}
	if x, n := shortVarint(b, 2<<3); n > 0 {
		m.Code = uint32(x)
		b = b[n:]
		if len(b) == 0 {
			goto done
		}
	}
	if v, n := shortBytes(b, 3<<3|2); n > 0 {
		m.Message = d.str(v)
		b = b[n:]
		if len(b) == 0 {
			goto done
		}
	}
	if x, n := shortVarint(b, 4<<3); n > 0 {
		m.Attempts = uint32(x)
		b = b[n:]
		if len(b) == 0 {
			goto done
		}
	}
	if v, n := shortBytes(b, 5<<3|2); n > 0 {
		m.PluginID = d.str(v)
		b = b[n:]
		if len(b) == 0 {
			goto done
		}
	}
	if v, n := shortBytes(b, 6<<3|2); n > 0 {
		m.VolumeID = d.str(v)
		b = b[n:]
		if len(b) == 0 {
			goto done
		}
	}
	for len(b) > 0 {
		// The general loop, for what the fast path left: the tag and the
		// value, inline for one-byte tags, lengths and varints.
		c := b[0]
		num, typ, n := protowire.Number(c>>3), protowire.Type(c&7), 1
		if c-8 >= 0x78 {
			if num, typ, n = protowire.ConsumeTag(b); n < 0 {
				return tagError(n)
			}
		}
		b = b[n:]
		var v []byte
		var x uint64
		switch typ {
		case protowire.BytesType:
			if len(b) > 0 && b[0] < 0x80 && int(b[0]) < len(b) {
				v, n = b[1:1+b[0]], 1+int(b[0])
			} else if v, n = protowire.ConsumeBytes(b); n < 0 {
				return valueError(num, n)
			}
		case protowire.VarintType:
			if len(b) > 0 && b[0] < 0x80 {
				x, n = uint64(b[0]), 1
			} else if x, n = protowire.ConsumeVarint(b); n < 0 {
				return valueError(num, n)
			}
		}
		var err error
		switch num {
		case 1:
			err = d.setString(typ, v, &m.Step)
		case 2:
			err = setUint32(typ, x, &m.Code)
		case 3:
			err = d.setString(typ, v, &m.Message)
		case 4:
			err = setUint32(typ, x, &m.Attempts)
		case 5:
			err = d.setString(typ, v, &m.PluginID)
		case 6:
			err = d.setString(typ, v, &m.VolumeID)
		default:
			if typ != protowire.BytesType && typ != protowire.VarintType {
				n, err = skipField(num, typ, b)
			}
		}
		if err != nil {
			return fieldError(num, typ, err)
		}
		b = b[n:]
	}
done:
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
		err = v.merge(&d, d.base)
	}
	if err != nil {
		return malformed("ClassifyResponse", err)
	}
	*m = v
	return nil
}

func (m *ClassifyResponse) merge(d *decoder, b []byte) error {
	// Fast path (see "decoding helpers"): the fields in number order.
	if x, n := shortVarint(b, 1<<3); n > 0 {
		m.Outcome = Outcome(uint32(x))
		b = b[n:]
		if len(b) == 0 {
			goto done
		}
	}
	if len(b) > 1 && b[0] == 2<<3 { // a time or age in ms: several bytes
		if x, n := protowire.ConsumeVarint(b[1:]); n > 0 {
			m.RetryAfterMs = int64(x)
			b = b[1+n:]
			if len(b) == 0 {
				goto done
			}
		}
	}
	if v, n := shortBytes(b, 3<<3|2); n > 0 {
		m.Reason = d.str(v)
		b = b[n:]
		if len(b) == 0 {
			goto done
		}
	}
	if v, n := shortBytes(b, 15<<3|2); n > 0 {
		m.Error = d.str(v)
		b = b[n:]
		if len(b) == 0 {
			goto done
		}
	}
	for len(b) > 0 {
		// The general loop, for what the fast path left: the tag and the
		// value, inline for one-byte tags, lengths and varints.
		c := b[0]
		num, typ, n := protowire.Number(c>>3), protowire.Type(c&7), 1
		if c-8 >= 0x78 {
			if num, typ, n = protowire.ConsumeTag(b); n < 0 {
				return tagError(n)
			}
		}
		b = b[n:]
		var v []byte
		var x uint64
		switch typ {
		case protowire.BytesType:
			if len(b) > 0 && b[0] < 0x80 && int(b[0]) < len(b) {
				v, n = b[1:1+b[0]], 1+int(b[0])
			} else if v, n = protowire.ConsumeBytes(b); n < 0 {
				return valueError(num, n)
			}
		case protowire.VarintType:
			if len(b) > 0 && b[0] < 0x80 {
				x, n = uint64(b[0]), 1
			} else if x, n = protowire.ConsumeVarint(b); n < 0 {
				return valueError(num, n)
			}
		}
		var err error
		switch num {
		case 1:
			err = setUint32(typ, x, (*uint32)(&m.Outcome))
		case 2:
			err = setInt64(typ, x, &m.RetryAfterMs)
		case 3:
			err = d.setString(typ, v, &m.Reason)
		case 15:
			err = d.setString(typ, v, &m.Error)
		default:
			if typ != protowire.BytesType && typ != protowire.VarintType {
				n, err = skipField(num, typ, b)
			}
		}
		if err != nil {
			return fieldError(num, typ, err)
		}
		b = b[n:]
	}
done:
	return nil
}
