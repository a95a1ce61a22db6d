package client

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
)

// The step journal (issue 14): the node agent's durable record of the keyed
// release steps it ran, under root_dir/journal, one small file per key.
//
// An agent can die after the driver answered a step and before the answer
// reached the leader; the leader then retries the step, with the same key
// (watcher.StepKey), once the agent is back. The journal is written after
// the driver answers and before the reply is sent, and fsynced, so the
// retry is answered from it instead of calling the driver twice. An entry
// that says "started" with no answer means the driver call may or may not
// have run: the agent calls again (every node step MUST be idempotent, CSI
// spec NodeUnpublishVolume / NodeUnstageVolume) and says so in its log.
//
// Only successes are kept: a step the driver refused is retried for real.
// Entries go when the leader acknowledges that the outcome is committed,
// after journalTTL, or, oldest first, beyond journalMax entries.

const (
	journalDir = "journal"
	// journalTTL outlives any retry the leader makes of one step (its
	// backoff is capped at minutes) and a node reboot.
	journalTTL = 24 * time.Hour
	// journalMax bounds the journal: far more release steps than one node
	// has in flight, a few hundred bytes each.
	journalMax = 4096
)

// Journal states.
const (
	entryStarted = "started"
	entryDone    = "done"
)

// journalEntry is one keyed step as recorded on disk.
type journalEntry struct {
	Key     string    `json:"key"`
	Method  string    `json:"method"`
	State   string    `json:"state"`
	Started time.Time `json:"started"`
	Done    time.Time `json:"done,omitzero"`
}

// errStepInFlight: a step with the same key is running in this agent.
var errStepInFlight = errors.New("a step with the same idempotency key is in progress on this node")

// journal is safe for concurrent use.
type journal struct {
	dir   string
	ttl   time.Duration
	max   int
	clock clockwork.Clock

	mu       sync.Mutex
	index    map[string]time.Time // file name -> last write, for TTL and bound
	inflight map[string]bool      // keys being executed now
}

// openJournal opens (creating) the journal under rootDir and drops the
// entries that expired while the agent was down. A file it cannot read is
// dropped with the rest of what it cannot trust: the worst a lost entry
// costs is one more idempotent driver call.
func openJournal(rootDir string, clock clockwork.Clock) (*journal, error) {
	dir := filepath.Join(rootDir, journalDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("step journal: %w", err)
	}
	j := &journal{dir: dir, ttl: journalTTL, max: journalMax, clock: clock,
		index: map[string]time.Time{}, inflight: map[string]bool{}}
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("step journal: %w", err)
	}
	for _, de := range des {
		name := de.Name()
		if !strings.HasSuffix(name, ".json") {
			_ = os.Remove(filepath.Join(dir, name)) // a temporary file a crash left
			continue
		}
		e, err := j.read(name)
		if err != nil || e == nil {
			_ = os.Remove(filepath.Join(dir, name))
			continue
		}
		j.index[name] = e.lastWrite()
	}
	j.mu.Lock()
	j.pruneLocked()
	j.mu.Unlock()
	return j, nil
}

func (e *journalEntry) lastWrite() time.Time {
	if e.Done.After(e.Started) {
		return e.Done
	}
	return e.Started
}

func fileName(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:]) + ".json"
}

// begin claims key for one execution of method. It returns the entry found
// for the key (nil: none), and errStepInFlight when the key is running
// already. Unless the entry found is done, it records "started" (fsynced)
// before returning; the caller then runs the step and calls finish.
func (j *journal) begin(key, method string) (*journalEntry, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.inflight[key] {
		return nil, errStepInFlight
	}
	name := fileName(key)
	prev, err := j.read(name)
	if err != nil {
		return nil, err
	}
	if prev != nil && (prev.Key != key || prev.Method != method) {
		prev = nil // another step (or a hash collision): not its answer
	}
	if prev != nil && prev.State == entryDone {
		return prev, nil
	}
	now := j.clock.Now()
	if err := j.writeLocked(name, &journalEntry{Key: key, Method: method, State: entryStarted, Started: now}); err != nil {
		return nil, err
	}
	j.inflight[key] = true
	return prev, nil
}

// finish records the driver's answer to the step begun for key: a success
// as done (fsynced), anything else by dropping the entry, so the leader's
// retry calls the driver again.
func (j *journal) finish(key, method string, ok bool) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	delete(j.inflight, key)
	name := fileName(key)
	if !ok {
		return j.removeLocked(name)
	}
	started := j.index[name]
	return j.writeLocked(name, &journalEntry{Key: key, Method: method, State: entryDone, Started: started, Done: j.clock.Now()})
}

// ack drops key's entry: its outcome is committed on the servers.
func (j *journal) ack(key string) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.inflight[key] {
		return nil // a retry is running it again; finish decides
	}
	return j.removeLocked(fileName(key))
}

// len is the number of entries.
func (j *journal) len() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return len(j.index)
}

func (j *journal) read(name string) (*journalEntry, error) {
	b, err := os.ReadFile(filepath.Join(j.dir, name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("step journal: %w", err)
	}
	var e journalEntry
	if err := json.Unmarshal(b, &e); err != nil || e.Key == "" || (e.State != entryStarted && e.State != entryDone) {
		// Torn or foreign: no answer can be trusted from it.
		return nil, nil
	}
	return &e, nil
}

// writeLocked replaces name atomically and durably: a temporary file,
// fsynced, renamed over it, then the directory fsynced, so a crash leaves
// the old entry or the new one, never half of one.
func (j *journal) writeLocked(name string, e *journalEntry) error {
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(j.dir, name+".tmp*")
	if err != nil {
		return fmt.Errorf("step journal: %w", err)
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), filepath.Join(j.dir, name))
	}
	if err == nil {
		err = syncDir(j.dir)
	}
	if err != nil {
		_ = os.Remove(f.Name())
		return fmt.Errorf("step journal: write %s entry for %s: %w", e.State, e.Key, err)
	}
	j.index[name] = e.lastWrite()
	j.pruneLocked()
	return nil
}

func (j *journal) removeLocked(name string) error {
	delete(j.index, name)
	err := os.Remove(filepath.Join(j.dir, name))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("step journal: %w", err)
	}
	return nil
}

// pruneLocked drops expired entries, then the oldest beyond max. An entry
// of a step running now is kept.
func (j *journal) pruneLocked() {
	now := j.clock.Now()
	for name, t := range j.index {
		if now.Sub(t) >= j.ttl {
			_ = j.removeLocked(name)
		}
	}
	if len(j.index) <= j.max {
		return
	}
	names := make([]string, 0, len(j.index))
	for name := range j.index {
		names = append(names, name)
	}
	sort.Slice(names, func(a, b int) bool { return j.index[names[a]].Before(j.index[names[b]]) })
	running := map[string]bool{}
	for k := range j.inflight {
		running[fileName(k)] = true
	}
	for _, name := range names {
		if len(j.index) <= j.max {
			break
		}
		if !running[name] {
			_ = j.removeLocked(name)
		}
	}
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
