package abi

// The protobuf wire codec's helpers, over protowire only: no reflection, so
// a Go guest that links it stays small (ABI.md "Wire messages"). The
// messages and their MarshalAppend, Unmarshal, merge and decodeFresh are
// generated from volhost.proto into messages_gen.go (abi/internal/gen, run
// by `go generate ./abi/...`); they use only the helpers below. Encoding is deterministic
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

// nextField reads the tag and value of the field at the front of b (the
// general loop of the other messages, without their fast paths: the
// merge of a loop_only message, which is rare, so the plain loop is enough). n is the bytes the field
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
