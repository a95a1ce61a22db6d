package main

import (
	"runtime"
	"unsafe"

	"github.com/volhost/volhost/abi"
	"github.com/volhost/volhost/abi/defaultpolicy"
)

func main() {}

var in = make([]byte, 64<<10)
var out []byte

//go:wasmexport buf
func buf() int32 { return int32(uintptr(unsafe.Pointer(&in[0]))) }

//go:wasmexport nop
func nop(n int32) int32 { return 1 }

//go:wasmexport sched
func sched(n int32) int32 { runtime.Gosched(); return 1 }

//go:wasmexport decode
func decode(n int32) int32 { var r abi.PolicyRequest; r.Unmarshal(in[:n]); return int32(len(r.Claims)) }

//go:wasmexport decide
func decide(n int32) int32 { var r abi.PolicyRequest; r.Unmarshal(in[:n]); resp := defaultpolicy.Decide(&r); return int32(len(resp.Decisions)) }

//go:wasmexport full
func full(n int32) int32 { var r abi.PolicyRequest; r.Unmarshal(in[:n]); resp := defaultpolicy.Decide(&r); out = resp.MarshalAppend(out[:0]); return int32(len(out)) }

//go:wasmexport fullsched
func fullsched(n int32) int32 { var r abi.PolicyRequest; r.Unmarshal(in[:n]); resp := defaultpolicy.Decide(&r); out = resp.MarshalAppend(out[:0]); runtime.Gosched(); return int32(len(out)) }

//go:wasmexport loop
func loop(n int32) int32 { s := 0; for i := 0; i < int(n); i++ { s += int(in[i]) }; return int32(s) }
