//go:build wasip1

// Command guest is the default release policy as an Extism plugin, built
// with the Extism Go PDK and standard Go:
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o guest.wasm ./guest
//
// It runs the same logic as volhost's default-policy module
// (abi/defaultpolicy) with the same protobuf wire codec (export "decide"),
// and, for reference, with JSON, the idiomatic Extism encoding
// (export "decide_json").
package main

import (
	"github.com/extism/go-pdk"

	"github.com/volhost/volhost/abi"
	"github.com/volhost/volhost/abi/defaultpolicy"
)

func main() {}

// out, req and resp are reused by every call, as volhost's Go SDK reuses
// its own (guest.HandleReleaseInto), so the two hosts run the same guest
// work: the request decoded in place from the PDK's copy of the input, the
// decisions written into one response.
var (
	out  []byte
	req  abi.PolicyRequest
	resp abi.PolicyResponse
)

//go:wasmexport decide
func decide() int32 {
	if err := req.UnmarshalBorrowing(pdk.Input()); err != nil {
		pdk.SetError(err)
		return 1
	}
	defaultpolicy.DecideInto(&req, &resp)
	out = resp.MarshalAppend(out[:0])
	pdk.Output(out)
	return 0
}

//go:wasmexport decide_json
func decideJSON() int32 {
	var req abi.PolicyRequest
	if err := pdk.InputJSON(&req); err != nil {
		pdk.SetError(err)
		return 1
	}
	if err := pdk.OutputJSON(defaultpolicy.Decide(&req)); err != nil {
		pdk.SetError(err)
		return 1
	}
	return 0
}
