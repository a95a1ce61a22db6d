package agent

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// lockFileName is the lock file inside data_dir.
const lockFileName = "volhost.lock"

// ErrDataDirLocked: another process holds the data directory.
var ErrDataDirLocked = errors.New("data directory is in use")

// dirLock is an exclusive flock on data_dir/volhost.lock. Without it a
// second agent on the same directory blocked silently for 20 s and more
// on raft-boltdb's own file lock; the flock fails at once and the file
// names the holder's pid. The kernel drops the lock when the process
// dies, so a crash never leaves a stale lock behind (the pid in the file
// may be stale, the lock never is).
type dirLock struct{ f *os.File }

func lockDataDir(dir string) (*dirLock, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	path := filepath.Join(dir, lockFileName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("data dir lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder := "another process"
		if b, rerr := os.ReadFile(path); rerr == nil {
			if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); perr == nil {
				holder = fmt.Sprintf("process %d", pid)
			}
		}
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s is held by %s (another volhost agent?)", ErrDataDirLocked, dir, holder)
		}
		return nil, fmt.Errorf("data dir lock %s: %w", path, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
		_ = f.Sync()
	}
	return &dirLock{f: f}, nil
}

// release unlocks (nil-safe; closing the file drops the flock).
func (l *dirLock) release() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}
