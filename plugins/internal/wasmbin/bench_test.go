package wasmbin

import (
	"testing"

	"github.com/volhost/volhost/plugins/pluginstest"
)

// BenchmarkInstrument: what instrumenting costs a module's load, on the Go
// default-policy example (about 3 MB; compiling it takes about 0.8 s).
//
//	go test -run '^$' -bench Instrument ./plugins/internal/wasmbin/
func BenchmarkInstrument(b *testing.B) {
	wasm := pluginstest.Wasm(b, "default-policy")
	b.SetBytes(int64(len(wasm)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Instrument(wasm, Preempt); err != nil {
			b.Fatal(err)
		}
	}
}
