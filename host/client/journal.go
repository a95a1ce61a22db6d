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

// The step journal: the node agent's durable record of the keyed
// release steps it ran, under root_dir/journal, one small file per key.
//
// An agent can die after the driver answered a step and before the answer
// reached the leader; the leader then retries the step, with the same key
// (attach.StepKey), once the agent is back. The journal is written after
// the driver answers and before the reply is sent, and fsynced, so the
// retry is answered from it instead of calling the driver twice. An entry
// that says "started" with no answer means the driver call may or may not
// have run: the agent calls again (every node step MUST be idempotent, CSI
// spec NodeUnpublishVolume / NodeUnstageVolume) and says so in its log.
//
// Only successes are kept: a step the driver refused is retried for real.
//
// An answer holds only until another step acts on the same path: an
// unstage answered "done" after the claim path staged the path again
// would leave the mount behind while the leader, told it is unstaged,
// detaches the disk under it. So every step, keyed or not, drops the
// answers recorded for its path (the staging path of a stage or unstage,
// the target path of a publish or unpublish) before it runs; a retry of
// one of them calls the driver again, which the CSI spec makes safe.
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
	Key    string `json:"key"`
	Method string `json:"method"`
	// Path is the path the step acts on; an entry without one (or on
	// another path than the retry's) answers nothing.
	Path    string    `json:"path"`
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
	index    map[string]time.Time       // file name -> last write, for TTL and bound
	paths    map[string]map[string]bool // path -> file names of its entries
	pathOf   map[string]string          // file name -> its entry's path
	inflight map[string]string          // keys being executed now -> their path
	// stale holds the in-flight keys whose path another step acted on
	// while they ran: their answer is not recorded.
	stale map[string]bool
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
		index: map[string]time.Time{}, paths: map[string]map[string]bool{}, pathOf: map[string]string{}, inflight: map[string]string{}, stale: map[string]bool{}}
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
		if err != nil || e == nil || e.Path == "" {
			// An entry without its path was written before answers were
			// tied to paths: no step could have made it stale, so it
			// cannot be trusted either.
			_ = os.Remove(filepath.Join(dir, name))
			continue
		}
		j.index[name] = e.lastWrite()
		j.addPathLocked(e.Path, name)
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

// begin claims key for one execution of method on path. It returns the
// entry found for the key (nil: none), and errStepInFlight when the key is
// running already. Unless the entry found is done, it drops the answers
// recorded for path (supersede) and records "started" (fsynced) before
// returning; the caller then runs the step and calls finish.
func (j *journal) begin(key, method, path string) (*journalEntry, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if _, ok := j.inflight[key]; ok {
		return nil, errStepInFlight
	}
	name := fileName(key)
	prev, err := j.read(name)
	if err != nil {
		return nil, err
	}
	if prev != nil && (prev.Key != key || prev.Method != method || prev.Path != path) {
		prev = nil // another step (or a hash collision): not its answer
	}
	if prev != nil && prev.State == entryDone {
		return prev, nil
	}
	if err := j.supersedeLocked(path); err != nil {
		return nil, err
	}
	now := j.clock.Now()
	if err := j.writeLocked(name, &journalEntry{Key: key, Method: method, Path: path, State: entryStarted, Started: now}); err != nil {
		return nil, err
	}
	j.inflight[key] = path
	return prev, nil
}

// supersede drops the answers recorded for path: a step on it is about to
// run (an unkeyed one: the claim path's stage or publish), and may undo
// what they did whatever it answers.
func (j *journal) supersede(path string) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.supersedeLocked(path)
}

func (j *journal) supersedeLocked(path string) error {
	for k, p := range j.inflight {
		if p == path {
			j.stale[k] = true
		}
	}
	var errs []error
	for name := range j.paths[path] {
		errs = append(errs, j.removeLocked(name))
	}
	return errors.Join(errs...)
}

// finish records the driver's answer to the step begun for key: a success
// as done (fsynced), anything else, or a success another step on its path
// made stale while it ran, by dropping the entry, so the leader's retry
// calls the driver again.
func (j *journal) finish(key, method string, ok bool) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	path := j.inflight[key]
	delete(j.inflight, key)
	stale := j.stale[key]
	delete(j.stale, key)
	name := fileName(key)
	if !ok || stale {
		return j.removeLocked(name)
	}
	started := j.index[name]
	return j.writeLocked(name, &journalEntry{Key: key, Method: method, Path: path, State: entryDone, Started: started, Done: j.clock.Now()})
}

// ack drops key's entry: its outcome is committed on the servers.
func (j *journal) ack(key string) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if _, ok := j.inflight[key]; ok {
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
	j.addPathLocked(e.Path, name)
	j.pruneLocked()
	return nil
}

func (j *journal) addPathLocked(path, name string) {
	if old, ok := j.pathOf[name]; ok && old != path {
		delete(j.paths[old], name)
		if len(j.paths[old]) == 0 {
			delete(j.paths, old)
		}
	}
	j.pathOf[name] = path
	if j.paths[path] == nil {
		j.paths[path] = map[string]bool{}
	}
	j.paths[path][name] = true
}

func (j *journal) removeLocked(name string) error {
	delete(j.index, name)
	if path, ok := j.pathOf[name]; ok {
		delete(j.pathOf, name)
		delete(j.paths[path], name)
		if len(j.paths[path]) == 0 {
			delete(j.paths, path)
		}
	}
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
