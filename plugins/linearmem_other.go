//go:build !linux

package plugins

import "github.com/tetratelabs/wazero/experimental"

// linearMemoryAllocator is nil off Linux: wazero allocates linear memory on
// the Go heap itself (linearmem_linux.go says what the mapping changes).
var linearMemoryAllocator experimental.MemoryAllocator
