// Package extism holds the Extism comparison benchmark for volhost's Wasm
// runtime: the default release policy judged through
// (a) native Go, (b) volhost's plugins.Manager with a Go guest, and (c) the
// Extism Go SDK with a Go guest built on the Extism Go PDK, all with
// timeouts enforced, in one run. It is a separate Go module so the product
// (github.com/volhost/volhost) never depends on Extism.
//
//	cd test/extism && go test -run '^$' -bench . -benchmem
package extism
