package plugins

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/jonboulle/clockwork"
)

// Watch reloads the module directory whenever a .wasm or .hcl file in it
// changes, after Debounce of quiet (a copy or an editor writes a file in
// several steps; reloading on each would compile half-written modules).
// It returns nil when ctx ends, or an error if the directory cannot be
// watched. Run it in one goroutine owned by the agent.
func (m *Manager) Watch(ctx context.Context) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("plugins: watch: %w", err)
	}
	defer w.Close()
	if err := w.Add(m.opts.Dir); err != nil {
		return fmt.Errorf("plugins: watch %s: %w", m.opts.Dir, err)
	}
	if m.watchReady != nil {
		m.watchReady()
	}
	var (
		timer  clockwork.Timer
		timerC <-chan time.Time
	)
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return nil
			}
			if _, isModule := moduleName(filepath.Base(ev.Name)); !isModule || ev.Op == fsnotify.Chmod {
				continue
			}
			if timer == nil {
				timer = m.opts.Clock.NewTimer(m.opts.Debounce)
			} else {
				timer.Reset(m.opts.Debounce)
			}
			timerC = timer.Chan()
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			m.log.Warn("watching module directory", "dir", m.opts.Dir, "error", err)
		case <-timerC:
			timerC = nil
			if _, err := m.Reload(ctx); err != nil {
				if err == ErrClosed {
					return ErrClosed
				}
				m.log.Error("reloading module directory", "dir", m.opts.Dir, "error", err)
			}
		}
	}
}
