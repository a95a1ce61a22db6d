package state

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/volhost/volhost/host/structs"
)

// persistVersion is the snapshot stream format. Bump it (and keep reading
// the old one) when the layout changes: raft snapshots outlive binaries.
const persistVersion = 1

// persistTables is the order tables are written in; the index table goes
// too, so blocking queries stay monotonic after a restore.
var persistTables = []string{TableIndex, TablePlugins, TableNodes, TableAllocs, TableVolumes, TableLeftovers, TableEvents,
	TableACLPolicies, TableACLTokens, TableACLBootstrap, TableSchedulers}

type persistHeader struct {
	Version int `json:"volhost_state"`
}

type persistRow struct {
	Table string          `json:"t"`
	Row   json.RawMessage `json:"r"`
}

// Persist writes every table of the current state to w as JSON lines (a
// header, then one row per line, tables in a fixed order, rows in primary
// key order), the raft snapshot format.
func (s *Store) Persist(w io.Writer) error { return s.Snapshot().Persist(w) }

// Persist writes the snapshot's tables to w (see Store.Persist). The output
// is canonical: equal states give equal bytes.
//
// Rows are marshalled on other goroutines (persistRows) and written here in
// order; each line is written as {"t":TABLE,"r":ROW} directly, the bytes a
// json.Encoder of persistRow writes, without marshalling each row twice.
func (snap *Snapshot) Persist(w io.Writer) error {
	bw := bufio.NewWriterSize(w, 1<<20)
	hdr, err := json.Marshal(persistHeader{Version: persistVersion})
	if err != nil {
		return fmt.Errorf("persist header: %w", err)
	}
	bw.Write(hdr)
	bw.WriteByte('\n')
	if err := persistRows(snap, bw); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("persist: %w", err)
	}
	return nil
}

// Restore replaces the whole state with the stream Persist wrote. The new
// state is built aside and swapped in only when the stream is read
// completely, so a bad stream leaves the store as it was. Blocking queries
// waiting on the old state wake up and rerun against the new one.
//
// Rows are decoded on other goroutines (restore.go) while this one inserts
// them, in stream order, into the new database: at 1,000,000 volumes
// decoding and memdb inserts cost about the same, and a restore blocks the
// FSM (BenchmarkScale times save and restore).
//
// A soft memory limit (GOMEMLIMIT) is lifted while it runs (memlimit.go).
func (s *Store) Restore(r io.Reader) error {
	defer liftMemoryLimit()()
	db := newDB()
	txn := db.Txn(true)
	defer txn.Abort()

	br := bufio.NewReaderSize(r, 1<<20)
	first, err := readLine(br, nil)
	if err != nil && !(errors.Is(err, io.EOF) && len(first) > 0) {
		return fmt.Errorf("restore: read header: %w", err)
	}
	var hdr persistHeader
	if err := json.Unmarshal(first, &hdr); err != nil {
		return fmt.Errorf("restore: read header: %w", err)
	}
	if hdr.Version != persistVersion {
		return fmt.Errorf("restore: unsupported state format version %d (want %d)", hdr.Version, persistVersion)
	}
	rows := startRowDecoder(br, 2)
	defer rows.stop()
	// Every row is validated with its write's rules, against the rows
	// before it, before anything derived from it is counted or indexed:
	// the derived tables dereference what the writes guarantee (a claim
	// that is not null, ...), and a replica installing a snapshot must
	// refuse a row no write could have made, not crash on it.
	check := newRowChecker(db, txn)
	// VolumeStats are counted as the volumes go in, which is exact when
	// they come in strictly increasing key order, as Persist writes them.
	// A stream that does not (duplicates are refused) is still restored,
	// and recounted from the table.
	var stats volumeDelta
	mods := volumeModsBuilder{}
	// The next batch's own checks run ahead while this one goes in
	// (restore_ahead.go); the one in flight is waited for on any return.
	var checking chan struct{}
	defer func() {
		if checking != nil {
			<-checking
		}
	}()
	for b, next := rows.next(), (*rowBatch)(nil); b != nil; b = next {
		if next = rows.next(); next != nil {
			if c := check.checkAhead(next); c != nil {
				checking = c
			}
		}
		if b.checked != nil {
			<-b.checked
		}
		for i := range b.rows {
			row := &b.rows[i]
			if row.err != nil {
				return fmt.Errorf("restore: row %d: %w", row.line, row.err)
			}
			if err := check.rowChecked(row.table, row.obj, row.ahead); err != nil {
				return fmt.Errorf("restore: row %d (%s %s): %w", row.line, row.table, rowKey(row.obj), err)
			}
			if obj, ok := row.obj.(*structs.Volume); ok {
				stats.count(obj)
				mods.add(obj)
			}
			if err := txn.Insert(row.table, row.obj); err != nil {
				return fmt.Errorf("restore: row %d into %s: %w", row.line, row.table, err)
			}
			if v, ok := row.obj.(*structs.Volume); ok {
				if err := errors.Join(insertClaimRows(txn, v), insertStuckRow(txn, v)); err != nil {
					return fmt.Errorf("restore: row %d: %w", row.line, err)
				}
			}
		}
	}
	if err := rows.err(); err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	if check.unordered {
		err = errors.Join(recountStats(txn), rebuildVolumeMods(txn), rebuildClaims(txn), rebuildStuck(txn))
	} else {
		err = errors.Join(insertStats(txn, stats.applyTo(VolumeStats{})), mods.insertInto(txn))
	}
	if err == nil {
		// From the claims table just built.
		err = recountNodeClaims(txn)
	}
	if err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	txn.Commit()

	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	old := s.cur.Swap(&dbState{db: db, abandon: make(chan struct{})})
	// After the swap: a cache filled from the new state under the old
	// generation is dropped at its next look-up, never the reverse.
	s.generation.Add(1)
	s.events = derivedEvents(db)
	s.eventFields = fieldsTable{}
	close(old.abandon)
	return nil
}

// decodeRow decodes one row of table, validating it (restore.go calls it).
func decodeRow(table string, raw []byte) (any, error) {
	var obj any
	switch table {
	case TableIndex:
		obj = &indexRow{}
	case TablePlugins:
		obj = &structs.Plugin{}
	case TableNodes:
		obj = &structs.Node{}
	case TableAllocs:
		obj = &structs.Alloc{}
	case TableVolumes:
		obj = &structs.Volume{}
	case TableLeftovers:
		obj = &structs.Leftover{}
	case TableEvents:
		obj = &eventRow{}
	case TableACLPolicies:
		obj = &structs.ACLPolicy{}
	case TableACLTokens:
		obj = &structs.ACLToken{}
	case TableSchedulers:
		obj = &structs.SchedulerCursor{}
	case TableACLBootstrap:
		obj = &aclBootstrapRow{}
	default:
		return nil, fmt.Errorf("unknown table %q", table)
	}
	if err := json.Unmarshal(raw, obj); err != nil {
		return nil, fmt.Errorf("decode %s row: %w", table, err)
	}
	if e, ok := obj.(*eventRow); ok && e.Event == nil {
		return nil, fmt.Errorf("event row %d has no event", e.Seq)
	}
	return obj, nil
}

// Digest is a sha256 (hex) over the canonical Persist stream: two stores
// with equal state have equal digests (used to check restarts and restores).
func (s *Store) Digest() (string, error) {
	h := sha256.New()
	if err := s.Persist(h); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
