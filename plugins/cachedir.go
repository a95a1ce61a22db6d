package plugins

import (
	"fmt"
	"os"
	"syscall"
)

// checkCacheDir makes sure the compilation cache directory is this
// process's alone, creating it (0700) when missing. wazero's cache holds
// native code, checked only by a CRC: whoever may write the directory
// runs code in the agent, under the key of any module, a signed one
// included. A directory another user owns, or that its group or others
// may write, is refused: pick another (module_cache_dir,
// VOLHOST_WAZERO_CACHE) or chmod it.
func checkCacheDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	}
	if perm := fi.Mode().Perm(); perm&0o022 != 0 {
		return fmt.Errorf("%s is writable by its group or others (mode %v): the cache holds native code the agent runs, so only its user may write it (chmod go-w)", dir, perm)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("%s is owned by uid %d, not this process's (%d): the cache holds native code the agent runs, so only its user may own it", dir, st.Uid, os.Geteuid())
	}
	return nil
}
