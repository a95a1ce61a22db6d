package plugins

import "sync"

// outputLimit bounds what is kept of a guest's stdout/stderr: the most
// recent bytes, which for a Go guest hold the panic or fatal error text.
const outputLimit = 4 << 10

// tailBuffer keeps the last outputLimit bytes written to it. It is the
// guest's stdout and stderr, so a chatty module cannot grow host memory.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
}

// Write implements io.Writer; it never fails.
func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := len(p)
	if n >= outputLimit {
		t.buf = append(t.buf[:0], p[n-outputLimit:]...)
		return n, nil
	}
	if over := len(t.buf) + n - outputLimit; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	t.buf = append(t.buf, p...)
	return n, nil
}

// String returns the kept bytes.
func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

// Reset drops the kept bytes, so an error carries only its own call's output.
func (t *tailBuffer) Reset() {
	t.mu.Lock()
	t.buf = t.buf[:0]
	t.mu.Unlock()
}

// Len is the number of kept bytes.
func (t *tailBuffer) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.buf)
}
