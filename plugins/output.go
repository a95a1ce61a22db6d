package plugins

import "sync"

// Guest output kept per instance: the first headLimit bytes (a Go runtime
// prints "fatal error: ..." or "panic: ..." first) and the last tailLimit
// bytes (the end of the stack dump), so a chatty or crashing module cannot
// grow host memory, and the error still says what happened.
const (
	headLimit   = 1 << 10
	tailLimit   = 3 << 10
	outputLimit = headLimit + tailLimit + len(elision)
	elision     = "\n…\n"
)

// tailBuffer is an instance's stdout and stderr: the head and the tail of
// what was written since the last Reset.
type tailBuffer struct {
	mu      sync.Mutex
	head    []byte
	tail    []byte
	dropped bool // bytes between head and tail were lost
}

// Write implements io.Writer; it never fails.
func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := len(p)
	if room := headLimit - len(t.head); room > 0 {
		k := min(room, len(p))
		t.head = append(t.head, p[:k]...)
		p = p[k:]
	}
	if len(p) >= tailLimit {
		t.dropped = t.dropped || len(t.tail) > 0 || len(p) > tailLimit
		t.tail = append(t.tail[:0], p[len(p)-tailLimit:]...)
		return n, nil
	}
	if over := len(t.tail) + len(p) - tailLimit; over > 0 {
		t.dropped = true
		t.tail = append(t.tail[:0], t.tail[over:]...)
	}
	t.tail = append(t.tail, p...)
	return n, nil
}

// String returns the kept bytes, marking where some were dropped.
func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.dropped {
		return string(t.head) + elision + string(t.tail)
	}
	return string(t.head) + string(t.tail)
}

// Reset drops the kept bytes, so an error carries only its own call's output.
func (t *tailBuffer) Reset() {
	t.mu.Lock()
	t.head, t.tail, t.dropped = t.head[:0], t.tail[:0], false
	t.mu.Unlock()
}

// Len is the number of kept bytes.
func (t *tailBuffer) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.head) + len(t.tail)
}
