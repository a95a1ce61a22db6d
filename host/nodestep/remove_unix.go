//go:build unix

package nodestep

import (
	"errors"
	"os"
	"syscall"
)

// Seams for the test that counts the system calls of a removal.
var (
	sysRmdir  = syscall.Rmdir
	sysUnlink = syscall.Unlink
)

// removeDirOrFile removes an empty directory or a file, like os.Remove,
// but tries rmdir first: os.Remove tries unlink first, which on a
// directory (every path removeEmpty meets but a block volume's target)
// always fails with EISDIR before its rmdir, so half of a release's
// removal system calls were failures (a visible share of the whole-host
// release CPU: BenchmarkAgentReleaseNative). rmdir on a file fails with ENOTDIR and
// only then is the path unlinked; a symlink is unlinked, not followed.
func removeDirOrFile(p string) error {
	err := ignoringEINTR(func() error { return sysRmdir(p) })
	if errors.Is(err, syscall.ENOTDIR) {
		err = ignoringEINTR(func() error { return sysUnlink(p) })
	}
	if err != nil {
		return &os.PathError{Op: "remove", Path: p, Err: err}
	}
	return nil
}

// ignoringEINTR retries a system call interrupted by a signal, as the os
// package does for its own.
func ignoringEINTR(call func() error) error {
	for {
		err := call()
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}
