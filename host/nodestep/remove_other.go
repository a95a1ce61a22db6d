//go:build !unix

package nodestep

import "os"

// removeDirOrFile is os.Remove where rmdir and unlink are not the unix
// system calls (remove_unix.go says why those are tried in that order).
func removeDirOrFile(p string) error { return os.Remove(p) }
