package abi

import (
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

// full returns every message with every field set, so its encoding shows
// each field number and wire type the codec writes.
func full() map[string]Message {
	s := samples()
	s["ConfigureResponse"] = &ConfigureResponse{Version: "1", AdaptSteps: []string{"a", "b"}, Error: "e"}
	s["PolicyResponse"] = &PolicyResponse{Decisions: []Decision{{AllocID: "a", Action: ActionWait, RetryAfterMs: 1, Reason: "r"}}, Error: "e"}
	s["AdapterResponse"] = &AdapterResponse{VolumeID: "v", NodeID: "n", SecretKeys: []string{"k"}, VolumeContext: map[string]string{"a": "b"}, Error: "e"}
	s["ClassifyResponse"] = &ClassifyResponse{Outcome: OutcomeRetry, RetryAfterMs: 1, Reason: "r", Error: "e"}
	s["FenceResponse"] = &FenceResponse{NodeID: "n", Confirmed: true, Reason: "r", RetryAfterMs: 1, Error: "e"}
	v, c, n := sampleVolume(), sampleClaim("1"), sampleNode("1")
	s["VolumeView"] = &v
	s["ClaimView"] = &c
	s["NodeView"] = &n
	s["AllocView"] = &AllocView{ID: "a", ClientStatus: "complete", TerminalAgeMs: 1}
	s["Decision"] = &Decision{AllocID: "a", Action: ActionWait, RetryAfterMs: 1, Reason: "r"}
	s["PluginView"] = &PluginView{ID: "p", Provider: "x", PublishUnpublish: true, StageUnstage: true}
	return s
}

// TestProtoMatchesCodec checks volhost.proto, the schema other-language
// guests use, against the hand-written codec: the same messages, field
// numbers and wire types.
func TestProtoMatchesCodec(t *testing.T) {
	src, err := os.ReadFile("volhost.proto")
	if err != nil {
		t.Fatal(err)
	}
	msgRe := regexp.MustCompile(`(?m)^message (\w+) \{`)
	fieldRe := regexp.MustCompile(`^\s*(repeated\s+)?(map<[^>]+>|\w+)\s+(\w+)\s*=\s*(\d+);`)
	enums := map[string]bool{"Action": true, "Outcome": true}
	scalars := map[string]bool{"int64": true, "uint32": true, "bool": true}

	schema := map[string][]string{} // message -> sorted "num:wiretype"
	var cur string
	for _, line := range strings.Split(string(src), "\n") {
		if m := msgRe.FindStringSubmatch(line); m != nil {
			cur = m[1]
			schema[cur] = nil
			continue
		}
		if strings.HasPrefix(line, "}") {
			cur = ""
			continue
		}
		if cur == "" {
			continue
		}
		if m := fieldRe.FindStringSubmatch(line); m != nil {
			typ := protowire.BytesType
			if m[1] == "" && (scalars[m[2]] || enums[m[2]]) {
				typ = protowire.VarintType
			}
			schema[cur] = append(schema[cur], m[4]+":"+strconv.Itoa(int(typ)))
		}
	}
	msgs := full()
	if len(schema) != len(msgs) {
		t.Errorf("volhost.proto has %d messages, the codec %d", len(schema), len(msgs))
	}
	for name, m := range msgs {
		want, ok := schema[name]
		if !ok {
			t.Errorf("message %s missing from volhost.proto", name)
			continue
		}
		seen := map[string]bool{}
		b := m.MarshalAppend(nil)
		for len(b) > 0 {
			num, typ, n := protowire.ConsumeField(b)
			if n < 0 {
				t.Fatalf("%s: %v", name, protowire.ParseError(n))
			}
			seen[strconv.Itoa(int(num))+":"+strconv.Itoa(int(typ))] = true
			b = b[n:]
		}
		var got []string
		for k := range seen {
			got = append(got, k)
		}
		sort.Strings(got)
		sort.Strings(want)
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("%s: codec writes fields %v, volhost.proto declares %v", name, got, want)
		}
	}
}
