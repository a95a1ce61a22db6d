package abi

import (
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

// freshCase is one message type's whole-message fast decoder and its
// general merge, for comparing the two on the same bytes.
type freshCase struct {
	name string
	// fresh decodes b with decodeFresh into a value full of another
	// message's fields (decodeFresh must replace all of them), merge into
	// a zero value; both return the value and the error.
	fresh, merge func(d *decoder, b []byte) (any, error)
}

func freshCases() []freshCase {
	stale := sampleClaim("stale")
	staleAlloc := AllocView{ID: "stale", ClientStatus: "running", TerminalAgeMs: 9}
	staleNode := sampleNode("stale")
	staleVolume := sampleVolume()
	staleDecision := Decision{AllocID: "stale", Action: ActionWait, RetryAfterMs: 7, Reason: "stale"}
	return []freshCase{
		{"ClaimView",
			func(d *decoder, b []byte) (any, error) { m := stale; err := m.decodeFresh(d, b); return m, err },
			func(d *decoder, b []byte) (any, error) { var m ClaimView; err := m.merge(d, b); return m, err }},
		{"AllocView",
			func(d *decoder, b []byte) (any, error) { m := staleAlloc; err := m.decodeFresh(d, b); return m, err },
			func(d *decoder, b []byte) (any, error) { var m AllocView; err := m.merge(d, b); return m, err }},
		{"NodeView",
			func(d *decoder, b []byte) (any, error) { m := staleNode; err := m.decodeFresh(d, b); return m, err },
			func(d *decoder, b []byte) (any, error) { var m NodeView; err := m.merge(d, b); return m, err }},
		{"VolumeView",
			func(d *decoder, b []byte) (any, error) { m := staleVolume; err := m.decodeFresh(d, b); return m, err },
			func(d *decoder, b []byte) (any, error) { var m VolumeView; err := m.merge(d, b); return m, err }},
		{"Decision",
			func(d *decoder, b []byte) (any, error) { m := staleDecision; err := m.decodeFresh(d, b); return m, err },
			func(d *decoder, b []byte) (any, error) { var m Decision; err := m.merge(d, b); return m, err }},
	}
}

// checkFresh fails unless every decodeFresh decodes b exactly as merge
// into a zero value does: the same value, an error in the same cases.
func checkFresh(t *testing.T, b []byte) {
	t.Helper()
	for _, c := range freshCases() {
		d, err := borrowingDecoder(b)
		if err != nil {
			return
		}
		got, gerr := c.fresh(&d, d.base)
		want, werr := c.merge(&d, d.base)
		if (gerr == nil) != (werr == nil) {
			t.Fatalf("%s %x: decodeFresh error %v, merge error %v", c.name, b, gerr, werr)
		}
		if werr == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("%s %x:\ndecodeFresh %+v\nmerge       %+v", c.name, b, got, want)
		}
	}
}

// TestDecodeFreshAgreesWithMerge runs checkFresh on the encodings the fast
// decoders take (fields in order, short) and on each way out of them:
// fields out of order or repeated, unknown fields, long strings and
// varints, map entries, a length past the end, a truncated varint.
func TestDecodeFreshAgreesWithMerge(t *testing.T) {
	long := strings.Repeat("x", 200)
	claim, node, volume := sampleClaim("1"), sampleNode("1"), sampleVolume()
	msgs := [][]byte{
		nil,
		claim.MarshalAppend(nil),
		(&ClaimView{AllocID: "a", State: "taken"}).MarshalAppend(nil),
		(&ClaimView{Attempts: 300, LastErrorCode: 14}).MarshalAppend(nil), // a two-byte varint
		(&ClaimView{AllocID: long, NodeID: "n"}).MarshalAppend(nil),       // a two-byte length
		(&AllocView{ID: "a", ClientStatus: "complete", TerminalAgeMs: 5}).MarshalAppend(nil),
		(&AllocView{ID: "a", TerminalAgeMs: 1000}).MarshalAppend(nil),
		(&AllocView{ID: "a", TerminalAgeMs: 120000}).MarshalAppend(nil),
		(&AllocView{ID: "a", TerminalAgeMs: 1 << 40}).MarshalAppend(nil), // ConsumeVarint
		(&NodeView{ID: "n", Status: "down", LastSeenAgeMs: 60000, ExternalID: "x"}).MarshalAppend(nil),
		node.MarshalAppend(nil), // map entries
		(&VolumeView{Namespace: "default", ID: "v", ExternalID: "e"}).MarshalAppend(nil),
		volume.MarshalAppend(nil),
		(&Decision{AllocID: "a", Action: ActionWait, RetryAfterMs: 25000, Reason: "grace"}).MarshalAppend(nil),
	}
	for _, m := range append([][]byte(nil), msgs...) {
		if len(m) == 0 {
			continue
		}
		msgs = append(msgs,
			append([]byte{unknownField, 0}, m...),              // unknown field first
			append(append([]byte(nil), m...), unknownField, 0), // unknown field last
			append(append([]byte(nil), m...), m...),            // every field twice
			m[:len(m)-1],                                       // cut short
		)
	}
	msgs = append(msgs,
		[]byte{2<<3 | 2, 1, 'n', 1<<3 | 2, 1, 'a'},            // out of order
		[]byte{1<<3 | 2, 9, 'a'},                              // length past the end
		[]byte{3 << 3, 0x80},                                  // truncated varint
		protowire.AppendVarint([]byte{3 << 3}, 1<<63),         // ten-byte varint
		[]byte{1 << 3, 5},                                     // wrong wire type (a varint for a string)
		[]byte{4<<3 | 2, 3, 1<<3 | 2, 1, 'k', 5<<3 | 2, 0},    // map entry, then more
		[]byte{1<<3 | 2, 0x80, 0x01},                          // two-byte length past the end
		[]byte{1<<3 | 2, 0, 2<<3 | 2, 0, 3<<3 | 2, 0, 4 << 3}, // empty strings, a cut varint
	)
	for _, b := range msgs {
		checkFresh(t, b)
	}
}

// FuzzDecodeFresh: on any bytes, each whole-message fast decoder agrees
// with merge into a zero value, and replaces whatever its value held.
func FuzzDecodeFresh(f *testing.F) {
	claim, volume := sampleClaim("1"), sampleVolume()
	f.Add(claim.MarshalAppend(nil))
	f.Add((&AllocView{ID: "a", ClientStatus: "complete", TerminalAgeMs: 120000}).MarshalAppend(nil))
	f.Add((&NodeView{ID: "n", Status: "down", LastSeenAgeMs: 60000}).MarshalAppend(nil))
	f.Add(volume.MarshalAppend(nil))
	f.Add((&Decision{AllocID: "a", Action: ActionWait, RetryAfterMs: 25000, Reason: "grace"}).MarshalAppend(nil))
	f.Fuzz(func(t *testing.T, b []byte) { checkFresh(t, b) })
}

// TestItemBytes: a nested message's one- and two-byte lengths, and what
// the fast path leaves to the general loop.
func TestItemBytes(t *testing.T) {
	body := make([]byte, 200)
	two := append(protowire.AppendVarint([]byte{3<<3 | 2}, 200), body...)
	for _, tc := range []struct {
		name  string
		b     []byte
		wantN int
	}{
		{"one-byte length", []byte{3<<3 | 2, 2, 'a', 'b', 9}, 4},
		{"two-byte length", two, 203},
		{"other tag", []byte{4<<3 | 2, 2, 'a', 'b'}, 0},
		{"past the end", []byte{3<<3 | 2, 5, 'a', 'b'}, 0},
		{"two-byte length past the end", two[:100], 0},
		{"three-byte length", append([]byte{3<<3 | 2, 0x80, 0x80, 0x01}, make([]byte, 1<<14)...), 0},
		{"empty last item", []byte{3<<3 | 2, 0}, 0}, // the general loop takes it
	} {
		v, n := itemBytes(tc.b, 3<<3|2)
		if n != tc.wantN {
			t.Errorf("%s: n = %d, want %d", tc.name, n, tc.wantN)
			continue
		}
		if n > 0 {
			want, m := protowire.ConsumeBytes(tc.b[1:])
			if m+1 != n || string(v) != string(want) {
				t.Errorf("%s: %d bytes %q, protowire: %d bytes %q", tc.name, n, v, m+1, want)
			}
		}
	}
}

// TestPolicyResponseInlineEncode: the decisions PolicyResponse.MarshalAppend
// encodes inline are byte for byte what the nested Decision.MarshalAppend
// writes, on both sides of every condition of the inline path.
func TestPolicyResponseInlineEncode(t *testing.T) {
	long := strings.Repeat("r", 120)
	for _, d := range []Decision{
		{AllocID: "alloc-1", Action: ActionRelease, Reason: "allocation complete"},
		{AllocID: "a", Action: ActionReleaseSkipNode, Reason: "r"},
		{AllocID: "a", Action: ActionWait, RetryAfterMs: 25000, Reason: "grace"},
		{AllocID: "", Action: ActionRelease, Reason: "no alloc"},
		{AllocID: "a", Action: ActionRelease},
		{AllocID: "a", Reason: "no action"},
		{AllocID: "a", Action: 200, Reason: "a two-byte action"},
		{AllocID: "a", Action: ActionRelease, Reason: long[:115]}, // body 122 bytes: inline
		{AllocID: "a", Action: ActionRelease, Reason: long[:116]}, // body 123 bytes
		{AllocID: "a", Action: ActionRelease, Reason: long},       // body over 127 bytes
		{AllocID: long, Action: ActionRelease, Reason: long},
	} {
		resp := PolicyResponse{Decisions: []Decision{d, d}, Error: "e"}
		var want []byte
		for range 2 {
			want = openNested(want, 1)
			start := len(want)
			want = closeNested(d.MarshalAppend(want), start)
		}
		want = appendString(want, 15, "e")
		if got := resp.MarshalAppend(nil); string(got) != string(want) {
			t.Errorf("%+v:\ngot  %x\nwant %x", d, got, want)
		}
	}
}

// TestRequestEncodersFastPath: the request encoders' fast paths (every
// string under 128 bytes, short varints, no maps) write exactly the bytes
// of the field-by-field encoding, here rebuilt with protowire, on values
// on both sides of each condition.
func TestRequestEncodersFastPath(t *testing.T) {
	strs := []string{"", "a", strings.Repeat("s", 127), strings.Repeat("l", 128), strings.Repeat("x", 300)}
	ints := []int64{0, 1, 127, 128, 1 << 40, -1}
	str := func(b []byte, num protowire.Number, v string) []byte {
		if v == "" {
			return b
		}
		return protowire.AppendString(protowire.AppendTag(b, num, protowire.BytesType), v)
	}
	varint := func(b []byte, num protowire.Number, v uint64) []byte {
		if v == 0 {
			return b
		}
		return protowire.AppendVarint(protowire.AppendTag(b, num, protowire.VarintType), v)
	}
	check := func(name string, got, want []byte) {
		t.Helper()
		if string(got) != string(want) {
			t.Fatalf("%s:\ngot  %x\nwant %x", name, got, want)
		}
	}
	for i := range 400 {
		s := func(k int) string { return strs[(i*7+k*3+i/5*k)%len(strs)] }
		n := func(k int) int64 { return ints[(i*5+k*11+i/3)%len(ints)] }
		c := ClaimView{AllocID: s(1), NodeID: s(2), Mode: s(3), State: s(4), Attempts: uint32(n(5)), LastErrorCode: uint32(n(6)),
			LastErrorKind: s(7), ExternalNodeID: s(8), AccessMode: s(9), AttachmentMode: s(10)}
		want := str(str(str(str(nil, 1, c.AllocID), 2, c.NodeID), 3, c.Mode), 4, c.State)
		want = varint(varint(want, 5, uint64(c.Attempts)), 6, uint64(c.LastErrorCode))
		want = str(str(str(str(want, 7, c.LastErrorKind), 8, c.ExternalNodeID), 9, c.AccessMode), 10, c.AttachmentMode)
		check("ClaimView", c.MarshalAppend(nil), want)

		a := AllocView{ID: s(1), ClientStatus: s(2), TerminalAgeMs: n(3)}
		check("AllocView", a.MarshalAppend(nil), varint(str(str(nil, 1, a.ID), 2, a.ClientStatus), 3, uint64(a.TerminalAgeMs)))

		nd := NodeView{ID: s(1), Status: s(2), LastSeenAgeMs: n(3), ExternalID: s(5)}
		check("NodeView", nd.MarshalAppend(nil), str(varint(str(str(nil, 1, nd.ID), 2, nd.Status), 3, uint64(nd.LastSeenAgeMs)), 5, nd.ExternalID))

		v := VolumeView{Namespace: s(1), ID: s(2), PluginID: s(3), AccessMode: s(4), AttachmentMode: s(5), ExternalID: s(6)}
		want = str(str(str(str(str(str(nil, 1, v.Namespace), 2, v.ID), 3, v.PluginID), 4, v.AccessMode), 5, v.AttachmentMode), 6, v.ExternalID)
		check("VolumeView", v.MarshalAppend(nil), want)
	}
}
