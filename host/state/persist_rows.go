package state

import (
	"bufio"
	"encoding/json"
	"fmt"
	"runtime"
	"sync"

	"github.com/volhost/volhost/internal/plainjson"
)

// The snapshot stream's writing pipeline (Persist): one goroutine walks the
// immutable snapshot in batches, a few marshal them, Persist's goroutine
// writes them in order (restore.go has the mirror image).

// persistBatchRows is how many rows a marshal batch of Persist holds.
const persistBatchRows = 512

type marshalBatch struct {
	table string
	rows  []any
	out   []byte
	err   error
	done  chan struct{}
}

// persistPipeline is one Persist's batches in flight and the buffers they
// hand back.
type persistPipeline struct {
	// free holds marshalled batches' buffers once written, for the next
	// batches. A save of 200,000 volumes allocated 336 MB for 62 MB of
	// stream (BenchmarkPersist): each batch's output grew from nothing by
	// doubling, the large steps zeroed, and json.Marshal returned a fresh
	// copy of every row on top; the collector's work and the zeroing
	// were most of the save's CPU besides encoding/json's reflection.
	free chan []byte
	// rows holds the batches' row slices, likewise.
	rows chan []any
}

func newPersistPipeline(workers int) *persistPipeline {
	return &persistPipeline{free: make(chan []byte, 4*workers+4), rows: make(chan []any, 4*workers+4)}
}

// batch starts a batch of table with recycled buffers when there are some.
func (p *persistPipeline) batch(table string) *marshalBatch {
	b := &marshalBatch{table: table, done: make(chan struct{})}
	select {
	case b.rows = <-p.rows:
	default:
		b.rows = make([]any, 0, persistBatchRows)
	}
	select {
	case b.out = <-p.free:
	default:
	}
	return b
}

// recycle takes back a written batch's buffers.
func (p *persistPipeline) recycle(b *marshalBatch) {
	select {
	case p.free <- b.out[:0]:
	default:
	}
	b.out = nil
}

// persistRows writes every row of snap's persisted tables to w, in table
// and primary key order, one line each. The snapshot is immutable, so
// marshalling is spread over a few goroutines; writing stays in order here.
func persistRows(snap *Snapshot, w *bufio.Writer) error {
	workers := max(1, min(4, runtime.GOMAXPROCS(0)-1))
	p := newPersistPipeline(workers)
	work := make(chan *marshalBatch, 2*workers)
	ordered := make(chan *marshalBatch, 2*workers+2)
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(workers)
	for range workers {
		go func() {
			defer wg.Done()
			for b := range work {
				b.marshal(p)
			}
		}()
	}
	var iterErr error
	go func() {
		defer close(work)
		defer close(ordered)
		iterErr = snap.eachPersistedRow(p, func(b *marshalBatch) bool {
			select {
			case ordered <- b:
			case <-quit:
				return false
			}
			select {
			case work <- b:
				return true
			case <-quit:
				return false
			}
		})
	}()
	defer wg.Wait()
	defer func() {
		close(quit)
		for range ordered {
		}
	}()
	for b := range ordered {
		<-b.done
		if b.err != nil {
			return b.err
		}
		if _, err := w.Write(b.out); err != nil {
			return fmt.Errorf("persist: %w", err)
		}
		p.recycle(b)
	}
	return iterErr
}

// eachPersistedRow cuts the persisted tables into batches for send; it
// stops when send returns false.
func (snap *Snapshot) eachPersistedRow(p *persistPipeline, send func(*marshalBatch) bool) error {
	for _, table := range persistTables {
		it, err := snap.txn.Get(table, indexID)
		if err != nil {
			return fmt.Errorf("persist %s: %w", table, err)
		}
		b := p.batch(table)
		for raw := it.Next(); raw != nil; raw = it.Next() {
			b.rows = append(b.rows, raw)
			if len(b.rows) == persistBatchRows {
				if !send(b) {
					return nil
				}
				b = p.batch(table)
			}
		}
		if len(b.rows) > 0 && !send(b) {
			return nil
		}
	}
	return nil
}

// marshal writes each row as {"t":TABLE,"r":ROW}\n into b.out. ROW is
// what json.Marshal gives. The rows of the tables that grow with the
// store (volumes, allocations, events) write those bytes with their
// AppendJSON, without encoding/json's reflection, which was most of a
// raft snapshot's CPU (BenchmarkPersist). json.Encoder writes the rest
// (HTML escaped, Marshaler output compacted) with a newline, which
// becomes the line's closing brace, straight into the batch's buffer.
func (b *marshalBatch) marshal(p *persistPipeline) {
	defer close(b.done)
	out := appendBuffer(b.out)
	var enc *json.Encoder
	var w plainjson.Writer // one per batch: a row's AppendJSON takes its address
	prefix := `{"t":"` + b.table + `","r":`
	for _, raw := range b.rows {
		out.reserve(len(prefix) + rowRoom)
		out = append(out, prefix...)
		if row, ok := raw.(jsonAppender); ok {
			w = plainjson.Writer{B: out}
			row.AppendJSON(&w)
			if w.OK() {
				out = append(w.B, "}\n"...)
				continue
			}
			// A string beyond ASCII, or a time json.Marshal refuses:
			// what w appended past out's length is overwritten below.
		}
		if enc == nil {
			enc = json.NewEncoder(&out)
		}
		if err := enc.Encode(raw); err != nil {
			b.err = fmt.Errorf("persist %s: %w", b.table, err)
			return
		}
		// Encode ended the row with '\n': close the line's object.
		out = append(out[:len(out)-1], "}\n"...)
	}
	b.out = out
	clear(b.rows)
	select {
	case p.rows <- b.rows[:0]:
	default:
	}
	b.rows = nil
}

// rowRoom is what a batch's buffer keeps free before each row: most rows
// fit, so their appends never grow it.
const rowRoom = 4 << 10

// jsonAppender is a row that writes its own JSON (host/structs'
// AppendJSON methods, eventRow's).
type jsonAppender interface{ AppendJSON(*plainjson.Writer) }

// appendBuffer is an io.Writer that appends to itself: json.Encoder
// writes each row's encoding into the batch's buffer in one Write.
type appendBuffer []byte

// reserve makes room for n more bytes, doubling the buffer: append's
// growth of a large slice (a quarter at a time) allocated twice what
// doubling does over a batch (TestPersistAllocatesLessThanItWrites).
func (a *appendBuffer) reserve(n int) {
	if cap(*a)-len(*a) >= n {
		return
	}
	grown := make([]byte, len(*a), 2*cap(*a)+n)
	copy(grown, *a)
	*a = grown
}

func (a *appendBuffer) Write(p []byte) (int, error) {
	*a = append(*a, p...)
	return len(p), nil
}
