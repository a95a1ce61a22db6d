package abi

import "testing"

// Native cost of the codec on the benchmark request (a volume with 8 claims).
func BenchmarkPolicyRequestUnmarshal(b *testing.B) {
	in := samplePolicyRequest().MarshalAppend(nil)
	b.ReportAllocs()
	b.SetBytes(int64(len(in)))
	var m PolicyRequest
	for i := 0; i < b.N; i++ {
		if err := m.Unmarshal(in); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkPolicyRequestMarshal(b *testing.B) {
	m := samplePolicyRequest()
	b.ReportAllocs()
	var out []byte
	for i := 0; i < b.N; i++ {
		out = m.MarshalAppend(out[:0])
	}
}

func BenchmarkPolicyResponseRoundTrip(b *testing.B) {
	m := samplePolicyResponse()
	b.ReportAllocs()
	var out []byte
	var got PolicyResponse
	for i := 0; i < b.N; i++ {
		out = m.MarshalAppend(out[:0])
		if err := got.Unmarshal(out); err != nil {
			b.Fatal(err)
		}
	}
}
