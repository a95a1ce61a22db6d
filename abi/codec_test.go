package abi

import (
	"bytes"
	"encoding/hex"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

// newLike returns a fresh zero message of the same type as m.
func newLike(m Message) Message {
	return reflect.New(reflect.TypeOf(m).Elem()).Interface().(Message)
}

func TestRoundTripSamples(t *testing.T) {
	for name, m := range samples() {
		t.Run(name, func(t *testing.T) {
			b := m.MarshalAppend(nil)
			got := newLike(m)
			if err := got.Unmarshal(b); err != nil {
				t.Fatalf("Unmarshal: %v", err)
			}
			if !reflect.DeepEqual(got, m) {
				t.Fatalf("round trip changed the message:\n got %+v\nwant %+v", got, m)
			}
			// Deterministic: encoding again gives the same bytes.
			if again := got.MarshalAppend(nil); !bytes.Equal(again, b) {
				t.Fatalf("re-encoding differs:\n%x\n%x", again, b)
			}
			// MarshalAppend appends: a prefix is kept intact.
			pre := []byte("prefix")
			if out := m.MarshalAppend(pre); !bytes.Equal(out[:6], []byte("prefix")) || !bytes.Equal(out[6:], b) {
				t.Fatalf("MarshalAppend did not append after the prefix")
			}
		})
	}
}

func TestGoldenEncoding(t *testing.T) {
	tests := []struct {
		name string
		msg  Message
		hex  string
	}{
		{"zero decision is empty", &Decision{}, ""},
		{"zero policy request is empty", &PolicyRequest{}, ""},
		// 0a 01 'a' | 10 02 | 18 ac02 (300) | 22 01 'r'
		{"decision", &Decision{AllocID: "a", Action: ActionWait, RetryAfterMs: 300, Reason: "r"}, "0a016110021" + "8ac0222" + "0172"},
		// the usual decision (no delay) takes the fast path; partial ones do not
		{"decision without delay", &Decision{AllocID: "a", Action: ActionRelease, Reason: "r"}, "0a0161" + "1001" + "220172"},
		{"decision without action", &Decision{AllocID: "a", Reason: "r"}, "0a0161" + "220172"},
		{"decision without ID", &Decision{Action: ActionRelease, Reason: "r"}, "1001" + "220172"},
		{"decision with a long reason", &Decision{AllocID: "a", Action: ActionRelease, Reason: strings.Repeat("r", 200)}, "0a0161" + "1001" + "22c801" + strings.Repeat("72", 200)},
		// 1 byte error at field 15: tag 15<<3|2 = 0x7a
		{"error field 15", &PolicyResponse{Error: "x"}, "7a0178"},
		// negative int64 is a 10-byte two's complement varint (proto int64)
		{"negative retry", &ClassifyResponse{RetryAfterMs: -1}, "10ffffffffffffffffff01"},
		// map entry {1:"k",2:"v"} as field 2; entries sorted by key
		{"map sorted", &ConfigureRequest{Config: map[string]string{"k": "v", "a": ""}}, "12030a0161" + "12060a016b120176"},
		// an empty nested singular message is omitted; an empty repeated item is kept
		{"empty nested", &PolicyRequest{Claims: []ClaimView{{}}}, "1a00"},
		{"bools", &PluginView{PublishUnpublish: true, StageUnstage: true}, "18012001"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := hex.EncodeToString(tc.msg.MarshalAppend(nil))
			if got != tc.hex {
				t.Fatalf("encoding = %s, want %s", got, tc.hex)
			}
		})
	}
}

func TestLongNestedLengths(t *testing.T) {
	// Bodies of 127, 128 and 20000 bytes need 1, 2 and 3 length bytes: the
	// in-place length fix-up in appendNested must move the body correctly.
	for _, n := range []int{0, 1, 120, 125, 126, 127, 128, 16381, 16382, 16383, 16384, 20000} {
		want := &PolicyRequest{
			Volume: VolumeView{ID: strings.Repeat("v", n)},
			Claims: []ClaimView{{AllocID: strings.Repeat("a", n)}, {NodeID: "n"}},
			Nodes:  []NodeView{{Meta: map[string]string{"k": strings.Repeat("m", n)}}},
		}
		var got PolicyRequest
		if err := got.Unmarshal(want.MarshalAppend(nil)); err != nil {
			t.Fatalf("n=%d: %v", n, err)
		}
		if n == 0 {
			want.Claims[0] = ClaimView{}
		}
		if !reflect.DeepEqual(&got, want) {
			t.Fatalf("n=%d: round trip differs", n)
		}
	}
}

func TestUnknownFieldsSkipped(t *testing.T) {
	for name, m := range samples() {
		t.Run(name, func(t *testing.T) {
			var b []byte
			// Unknown fields of every wire type, before and after the known ones.
			unknown := func(b []byte) []byte {
				b = protowire.AppendTag(b, 99, protowire.VarintType)
				b = protowire.AppendVarint(b, 12345)
				b = protowire.AppendTag(b, 100, protowire.Fixed32Type)
				b = protowire.AppendFixed32(b, 7)
				b = protowire.AppendTag(b, 101, protowire.Fixed64Type)
				b = protowire.AppendFixed64(b, 7)
				b = protowire.AppendTag(b, 102, protowire.BytesType)
				b = protowire.AppendString(b, "future")
				b = protowire.AppendTag(b, 103, protowire.StartGroupType)
				b = protowire.AppendTag(b, 1, protowire.VarintType)
				b = protowire.AppendVarint(b, 1)
				return protowire.AppendTag(b, 103, protowire.EndGroupType)
			}
			b = unknown(b)
			b = m.MarshalAppend(b)
			b = unknown(b)
			got := newLike(m)
			if err := got.Unmarshal(b); err != nil {
				t.Fatalf("Unmarshal with unknown fields: %v", err)
			}
			if !reflect.DeepEqual(got, m) {
				t.Fatalf("unknown fields changed the message: %+v", got)
			}
		})
	}
}

func TestMergeSemantics(t *testing.T) {
	// Two occurrences of a singular nested field merge (proto3), a scalar
	// repeated later wins, map entries accumulate with the last key winning.
	a := (&PolicyRequest{NowUnixMs: 1, Volume: VolumeView{ID: "v", Context: map[string]string{"x": "1"}}}).MarshalAppend(nil)
	b := (&PolicyRequest{NowUnixMs: 2, Volume: VolumeView{PluginID: "p", Context: map[string]string{"x": "2", "y": "3"}}}).MarshalAppend(nil)
	var got PolicyRequest
	if err := got.Unmarshal(append(a, b...)); err != nil {
		t.Fatal(err)
	}
	want := PolicyRequest{NowUnixMs: 2, Volume: VolumeView{ID: "v", PluginID: "p", Context: map[string]string{"x": "2", "y": "3"}}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("merged = %+v, want %+v", got, want)
	}
}

func TestUnmarshalResets(t *testing.T) {
	m := samplePolicyRequest()
	if err := m.Unmarshal((&PolicyRequest{NowUnixMs: 5}).MarshalAppend(nil)); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(*m, PolicyRequest{NowUnixMs: 5}) {
		t.Fatalf("Unmarshal kept old state: %+v", *m)
	}
}

func TestMalformed(t *testing.T) {
	valid := samplePolicyRequest().MarshalAppend(nil)
	tooManyClaims := func() []byte {
		var b []byte
		for i := 0; i <= MaxRepeated; i++ {
			b = append(b, 0x1a, 0x00) // field 3, empty ClaimView
		}
		return b
	}()
	tooManyEntries := func() []byte {
		var b []byte
		for i := 0; i <= MaxRepeated; i++ {
			e := protowire.AppendTag(nil, 1, protowire.BytesType)
			e = protowire.AppendString(e, strings.Repeat("k", 1+i%7)+string(rune('a'+i%26))+itoa(i))
			b = protowire.AppendTag(b, 2, protowire.BytesType)
			b = protowire.AppendBytes(b, e)
		}
		return b
	}()
	tooManySecrets := func() []byte {
		var b []byte
		for i := 0; i <= MaxRepeated; i++ {
			b = append(b, 0x1a, 0x00) // field 3, empty string
		}
		return b
	}()
	tests := []struct {
		name string
		msg  Message
		in   []byte
		want string
	}{
		{"truncated", &PolicyRequest{}, valid[:len(valid)-3], "PolicyRequest"},
		{"field number zero", &PolicyRequest{}, []byte{0x00, 0x01}, "tag"},
		{"truncated varint", &PolicyRequest{}, []byte{0x08, 0xff}, "field 1"},
		{"wrong wire type for string", &Decision{}, []byte{0x08, 0x01}, "wire type 0, want 2"},
		{"wrong wire type for varint", &Decision{}, []byte{0x12, 0x00}, "wire type 2, want 0"},
		{"length past end", &ConfigureResponse{}, []byte{0x0a, 0x05, 'a'}, "field 1"},
		{"bad nested claim", &PolicyRequest{}, []byte{0x1a, 0x02, 0x28, 0xff}, "item 0"},
		{"bad map entry", &ConfigureRequest{}, []byte{0x12, 0x02, 0x08, 0x01}, "map entry"},
		{"too many claims", &PolicyRequest{}, tooManyClaims, "more than 10000 items"},
		{"too many map entries", &ConfigureRequest{}, tooManyEntries, "more than 10000 entries"},
		{"too many secret keys", &AdapterResponse{}, tooManySecrets, "more than 10000 items"},
		{"over size limit", &ConfigureResponse{}, make([]byte, MaxMessageSize+1), "exceeds"},
		{"lone end group", &ClassifyResponse{}, []byte{0x0c}, "wire type 4"},
		{"unknown lone end group", &ClassifyResponse{}, []byte{0x6c}, "field 13: unknown field"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.msg.Unmarshal(tc.in)
			if err == nil {
				t.Fatal("Unmarshal accepted malformed input")
			}
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not mention %q", err, tc.want)
			}
			if !reflect.DeepEqual(tc.msg, newLike(tc.msg)) {
				t.Fatalf("failed Unmarshal left state behind: %+v", tc.msg)
			}
		})
	}
}

func TestFailedUnmarshalLeavesMessageUntouched(t *testing.T) {
	m := samplePolicyRequest()
	if err := m.Unmarshal([]byte{0x08, 0x01, 0x1a, 0x09}); err == nil {
		t.Fatal("Unmarshal accepted a truncated claim")
	}
	if !reflect.DeepEqual(m, samplePolicyRequest()) {
		t.Fatalf("failed Unmarshal changed the message: %+v", m)
	}
}

// The guest SDK reuses its request buffer: decoded strings must not alias it.
func TestDecodedStringsDoNotAliasInput(t *testing.T) {
	in := samplePolicyRequest().MarshalAppend(nil)
	var got PolicyRequest
	if err := got.Unmarshal(in); err != nil {
		t.Fatal(err)
	}
	for i := range in {
		in[i] = 'X'
	}
	if !reflect.DeepEqual(&got, samplePolicyRequest()) {
		t.Fatalf("overwriting the input changed the decoded message: %+v", got.Claims[0])
	}
}

func TestRepeatedPresized(t *testing.T) {
	one := &PolicyRequest{Claims: []ClaimView{{AllocID: "a"}}, Allocs: []AllocView{{ID: "a"}}, Nodes: []NodeView{{ID: "n"}}}
	noNodes := &PolicyRequest{Claims: []ClaimView{{AllocID: "a"}}, Allocs: []AllocView{{ID: "a"}}}
	tests := []struct {
		name string
		in   *PolicyRequest
		caps [3]int // claims, allocs, nodes; -1: nil
	}{
		{"eight claims", samplePolicyRequest(), [3]int{8, 8, 8}},
		{"one claim: one shared allocation", one, [3]int{1, 1, 1}},
		{"one claim, no nodes", noNodes, [3]int{1, 1, -1}},
		{"empty", &PolicyRequest{NowUnixMs: 1}, [3]int{-1, -1, -1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got PolicyRequest
			if err := got.Unmarshal(tc.in.MarshalAppend(nil)); err != nil {
				t.Fatal(err)
			}
			capOf := func(isNil bool, c int) int {
				if isNil {
					return -1
				}
				return c
			}
			caps := [3]int{capOf(got.Claims == nil, cap(got.Claims)), capOf(got.Allocs == nil, cap(got.Allocs)), capOf(got.Nodes == nil, cap(got.Nodes))}
			if caps != tc.caps {
				t.Fatalf("caps %v, want %v", caps, tc.caps)
			}
			// A handler growing one repeated field must not overwrite another.
			allocs := slices.Clone(got.Allocs)
			got.Claims = append(got.Claims, ClaimView{AllocID: "new"}, ClaimView{AllocID: "new2"})
			if !reflect.DeepEqual(got.Allocs, allocs) {
				t.Fatalf("appending claims changed allocs to %+v", got.Allocs)
			}
		})
	}
}

func itoa(i int) string {
	return string(protowire.AppendVarint(nil, uint64(i)))
}

// UnmarshalReusing and UnmarshalBorrowing decode exactly what Unmarshal
// does, whatever the value held before (more items, fewer, none, a failed
// decode), and once its slices are large enough UnmarshalReusing allocates
// only the request's string copy and UnmarshalBorrowing nothing.
func TestPolicyRequestUnmarshalReusing(t *testing.T) {
	big := samplePolicyRequest()
	small := &PolicyRequest{NowUnixMs: 7, Claims: []ClaimView{{AllocID: "x", NodeID: "n", State: "taken"}}}
	empty := &PolicyRequest{Volume: VolumeView{ID: "v"}}
	var reused, borrowed PolicyRequest
	for i, m := range []*PolicyRequest{big, small, empty, big, small, big} {
		in := m.MarshalAppend(nil)
		var fresh PolicyRequest
		if err := fresh.Unmarshal(in); err != nil {
			t.Fatal(err)
		}
		if err := reused.UnmarshalReusing(in); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if !reflect.DeepEqual(normalizeEmpty(reused), normalizeEmpty(fresh)) {
			t.Fatalf("step %d: reused decode\n%+v\nfresh decode\n%+v", i, reused, fresh)
		}
		if err := borrowed.UnmarshalBorrowing(in); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if !reflect.DeepEqual(normalizeEmpty(borrowed), normalizeEmpty(fresh)) {
			t.Fatalf("step %d: borrowing decode\n%+v\nfresh decode\n%+v", i, borrowed, fresh)
		}
	}
	for _, decode := range []func([]byte) error{reused.UnmarshalReusing, borrowed.UnmarshalBorrowing} {
		if err := decode([]byte{0xff}); err == nil {
			t.Fatal("malformed request decoded")
		}
	}
	if !reflect.DeepEqual(reused, PolicyRequest{}) || !reflect.DeepEqual(borrowed, PolicyRequest{}) {
		t.Fatalf("a failed decode left %+v / %+v", reused, borrowed)
	}
	// The borrowed strings are b's own bytes (that is the contract): a
	// change to b shows through them, where the copy does not.
	in := small.MarshalAppend(nil)
	if err := borrowed.UnmarshalBorrowing(in); err != nil {
		t.Fatal(err)
	}
	if err := reused.UnmarshalReusing(in); err != nil {
		t.Fatal(err)
	}
	in[bytes.Index(in, []byte("taken"))] = 'b'
	if borrowed.Claims[0].State != "baken" || reused.Claims[0].State != "taken" {
		t.Fatalf("after a change to the input: borrowed %q, copied %q", borrowed.Claims[0].State, reused.Claims[0].State)
	}
	// Without maps (a policy request's nodes carry no meta), a reused
	// decode is the string copy alone.
	noMaps := samplePolicyRequest()
	noMaps.Volume.Context = nil
	for i := range noMaps.Nodes {
		noMaps.Nodes[i].Meta = nil
	}
	in = noMaps.MarshalAppend(nil)
	_ = reused.UnmarshalReusing(in)
	if n := testing.AllocsPerRun(100, func() { _ = reused.UnmarshalReusing(in) }); n != 1 {
		t.Fatalf("%.0f allocations per reused decode, want 1 (the string copy)", n)
	}
	_ = reused.UnmarshalBorrowing(in)
	if n := testing.AllocsPerRun(100, func() { _ = reused.UnmarshalBorrowing(in) }); n != 0 {
		t.Fatalf("%.0f allocations per borrowing decode, want 0", n)
	}
	var fresh PolicyRequest
	if n := testing.AllocsPerRun(100, func() { _ = fresh.Unmarshal(in) }); n < 4 {
		t.Fatalf("a fresh decode makes %.0f allocations: the comparison above proves nothing", n)
	}
}

// normalizeEmpty makes empty repeated fields nil, as Unmarshal leaves
// them, so a reused (empty, non-nil) slice compares equal.
func normalizeEmpty(m PolicyRequest) PolicyRequest {
	if len(m.Claims) == 0 {
		m.Claims = nil
	}
	if len(m.Allocs) == 0 {
		m.Allocs = nil
	}
	if len(m.Nodes) == 0 {
		m.Nodes = nil
	}
	return m
}

// TestFenceCodecMalformed: the ABI 1.1 messages refuse what the others
// refuse (section 6), and merge as proto3 says.
func TestFenceCodecMalformed(t *testing.T) {
	for _, tc := range []struct {
		name string
		msg  Message
		in   []byte
		want string
	}{
		{"node as varint", &FenceRequest{}, []byte{2 << 3, 1}, "field 2"},
		{"confirmed as bytes", &FenceResponse{}, []byte{2<<3 | 2, 1, 'x'}, "field 2"},
		{"truncated reason", &FenceResponse{}, []byte{3<<3 | 2, 5, 'a'}, "field 3"},
		{"bad tag", &FenceResponse{}, []byte{0xff}, "tag"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.msg.Unmarshal(tc.in)
			if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Unmarshal(%x) = %v, want ErrMalformed naming %q", tc.in, err, tc.want)
			}
		})
	}
	// Claims accumulate; a nested node seen twice merges.
	a := (&FenceRequest{Node: NodeView{ID: "n1"}, Claims: []ClaimView{{AllocID: "a"}}}).MarshalAppend(nil)
	b := (&FenceRequest{Node: NodeView{Status: "down"}, Claims: []ClaimView{{AllocID: "b"}}}).MarshalAppend(nil)
	var got FenceRequest
	if err := got.Unmarshal(append(a, b...)); err != nil {
		t.Fatal(err)
	}
	if got.Node.ID != "n1" || got.Node.Status != "down" || len(got.Claims) != 2 {
		t.Fatalf("merge: %+v", got)
	}
}

func TestFenceAnswerError(t *testing.T) {
	req := &FenceRequest{Node: NodeView{ID: "n1"}}
	for _, tc := range []struct {
		name string
		resp FenceResponse
		want string
	}{
		{"confirmed", FenceResponse{NodeID: "n1", Confirmed: true, Reason: "terminated"}, ""},
		{"not confirmed, no reason", FenceResponse{NodeID: "n1"}, ""},
		{"other node", FenceResponse{NodeID: "n2", Confirmed: true, Reason: "x"}, `asked about node "n1"`},
		{"no node", FenceResponse{Confirmed: true, Reason: "x"}, `names node ""`},
		{"no reason", FenceResponse{NodeID: "n1", Confirmed: true}, "without a reason"},
		{"long reason", FenceResponse{NodeID: "n1", Confirmed: true, Reason: strings.Repeat("r", MaxFenceReasonLength+1)}, "at most 256"},
		{"bad utf8", FenceResponse{NodeID: "n1", Confirmed: true, Reason: "\xff"}, "UTF-8"},
		{"negative retry", FenceResponse{NodeID: "n1", RetryAfterMs: -1}, "negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := FenceAnswerError(req, &tc.resp)
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Fatalf("FenceAnswerError = %q, want %q", got, tc.want)
			}
		})
	}
}
