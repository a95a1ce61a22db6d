//go:build wasip1

//lint:file-ignore U1000 the exports are reached by the host through go:wasmexport, which staticcheck does not follow.

package main

import (
	"runtime"
	"unsafe"

	"github.com/volhost/volhost/abi"
)

var in, out []byte

//go:wasmexport volhost_abi_version
func exportVersion() int32 { return wrongVersion }

//go:wasmexport volhost_buffer
func exportBuffer(size int32) int32 {
	if cap(in) < int(size) || cap(in) == 0 {
		in = make([]byte, max(int(size), 1024))
	}
	in = in[:cap(in)]
	return int32(uintptr(unsafe.Pointer(&in[0])))
}

func result() int64 {
	runtime.Gosched()
	if len(out) == 0 {
		return 0
	}
	return int64(abi.PackResult(uint32(uintptr(unsafe.Pointer(&out[0]))), uint32(len(out))))
}

//go:wasmexport volhost_configure
func exportConfigure(n int32) int64 {
	out = configure(in[:n])
	return result()
}

//go:wasmexport volhost_decide_release
func exportDecideRelease(n int32) int64 {
	out = decide(in[:n])
	return result()
}
