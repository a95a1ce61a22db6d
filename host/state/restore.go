package state

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"runtime"
	"sync"

	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/internal/plainjson"
)

// The snapshot stream's pipelines (BenchmarkScale times save and restore
// of 1,000,000 volumes).
//
// Restore: one goroutine cuts the stream into batches of lines, a few
// decode them, and Restore's goroutine takes the batches back in stream
// order and inserts their rows. Decoding a row is independent of every
// other row; inserting is not (memdb has one writer, event rings count in
// order), so only the decoding is spread.
//
// Persist (persistRows, persist_rows.go): the mirror image; one goroutine
// walks the immutable snapshot in batches, a few marshal them, Persist's
// goroutine writes them in order.

// restoreBatchLines is how many rows travel together: enough to make the
// channel hand-offs negligible, small enough to keep a few batches in
// flight cheaply.
const restoreBatchLines = 512

// decodedRow is one snapshot row, decoded (or the error that refused it).
type decodedRow struct {
	line  int
	table string
	obj   any
	err   error
	ahead aheadCheck // its own checks, when they ran ahead (restore_ahead.go)
}

type rowBatch struct {
	lines [][]byte // the raw rows, sliced out of buf
	buf   []byte
	first int // line number of lines[0]
	rows  []decodedRow
	done  chan struct{} // closed when rows is filled
	// checked, when not nil, is closed when the rows' own checks, run
	// ahead of their inserts, are in (rowChecker.checkAhead).
	checked chan struct{}
}

// rowDecoder owns the pipeline's goroutines; stop ends them all.
type rowDecoder struct {
	ordered  chan *rowBatch // batches in stream order, as they are read
	quit     chan struct{}
	quitOnce sync.Once
	wg       sync.WaitGroup
	readErr  error // set by the reader before it closes ordered
	// free holds raw-line buffers the decoders are done with, for the
	// reader's next batches: a restore at 1,000,000 volumes otherwise
	// allocated about half its garbage in them (BenchmarkScale).
	free chan []byte
}

// startRowDecoder reads rows from r, the first on line number firstLine.
func startRowDecoder(r *bufio.Reader, firstLine int) *rowDecoder {
	workers := max(1, min(4, runtime.GOMAXPROCS(0)-1))
	d := &rowDecoder{ordered: make(chan *rowBatch, 2*workers+2), quit: make(chan struct{}), free: make(chan []byte, 4*workers+4)}
	work := make(chan *rowBatch, 2*workers)
	d.wg.Add(1 + workers)
	go func() {
		defer d.wg.Done()
		defer close(work)
		defer close(d.ordered)
		d.readErr = d.read(r, firstLine, work)
	}()
	for range workers {
		go func() {
			defer d.wg.Done()
			in := newInterner()
			for b := range work {
				b.decode(in, d.free)
			}
		}()
	}
	return d
}

// read cuts r into batches and hands each to the decoders and, in order,
// to the inserter. Blank lines are skipped (a trailing newline).
func (d *rowDecoder) read(r *bufio.Reader, line int, work chan<- *rowBatch) error {
	b := d.newRowBatch(line)
	send := func() bool {
		select {
		case d.ordered <- b:
		case <-d.quit:
			return false
		}
		select {
		case work <- b:
		case <-d.quit:
			return false
		}
		return true
	}
	for ; ; line++ {
		start := len(b.buf)
		var err error
		b.buf, err = appendLine(r, b.buf)
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("row %d: %w", line, err)
		}
		if row := b.buf[start:]; len(bytes.Trim(row, jsonSpace)) > 0 {
			if len(b.lines) == 0 {
				b.first = line
			}
			b.lines = append(b.lines, row)
		} else {
			b.buf = b.buf[:start]
		}
		if len(b.lines) > 0 && (len(b.lines) == restoreBatchLines || err != nil) {
			if !send() {
				return nil
			}
			b = d.newRowBatch(line + 1)
		}
		if err != nil { // io.EOF
			return nil
		}
	}
}

// newRowBatch starts a batch at line first, with a buffer a decoder has
// given back when there is one.
func (d *rowDecoder) newRowBatch(first int) *rowBatch {
	var buf []byte
	select {
	case buf = <-d.free:
	default:
		buf = make([]byte, 0, 256<<10)
	}
	return &rowBatch{first: first, lines: make([][]byte, 0, restoreBatchLines), buf: buf, done: make(chan struct{})}
}

// next returns the next batch in stream order, decoded, or nil at the end
// of the stream (then err says whether reading failed).
func (d *rowDecoder) next() *rowBatch {
	b, ok := <-d.ordered
	if !ok {
		return nil
	}
	<-b.done
	return b
}

// err is the reader's error; valid once next has returned nil.
func (d *rowDecoder) err() error { return d.readErr }

// stop ends the pipeline (early, after a bad row, or at the end) and
// waits for its goroutines.
func (d *rowDecoder) stop() {
	d.quitOnce.Do(func() { close(d.quit) })
	for range d.ordered { // unblock the reader; decoders drain work
	}
	d.wg.Wait()
}

func (b *rowBatch) decode(in *interner, free chan<- []byte) {
	defer close(b.done)
	b.rows = make([]decodedRow, len(b.lines))
	for i, raw := range b.lines {
		row := &b.rows[i]
		row.line = b.first + i
		var plain bool
		row.table, row.obj, plain, row.err = decodeLine(raw, in)
		if row.err == nil && !plain {
			in.row(row.obj)
		}
	}
	// Rows now hold their own copies of every string (json.Unmarshal and
	// the plain readers copy what they keep): the raw bytes can be reused.
	select {
	case free <- b.buf[:0]:
	default:
	}
	b.lines, b.buf = nil, nil
}

// decodeLine decodes one persisted row. Persist writes
// {"t":"TABLE","r":ROW}: a line of exactly that shape has ROW decoded
// directly, in one pass (not once as a json.RawMessage and again into the
// row type); any other line, or one whose ROW fails there, takes the
// general path, so the lines accepted are exactly those json.Unmarshal
// accepts. Both validate all of the row. The rows of the tables that grow
// with the store (volumes, allocations, events) are read without
// encoding/json when json.Marshal wrote them plainly (decodePlainVolume,
// host/structs' Read*JSON), to the same row json.Unmarshal would give;
// plain is true for a row whose strings are interned already.
func decodeLine(line []byte, in *interner) (table string, obj any, plain bool, err error) {
	if table, row, ok := splitPersistRow(line); ok {
		switch table {
		case TableVolumes:
			if v, shared, ok := decodePlainVolume(row, in); ok {
				return table, v, shared, nil
			}
		case TableAllocs:
			if a, ok := readWhole(row, structs.ReadAllocJSON); ok {
				return table, a, false, nil
			}
		case TableEvents:
			if e, ok := readWhole(row, readEventRow); ok && e.Event != nil {
				return table, e, false, nil
			}
		}
		if obj, err := decodeRow(table, row); err == nil {
			return table, obj, false, nil
		}
	}
	var pr persistRow
	if err := json.Unmarshal(line, &pr); err != nil {
		return "", nil, false, err
	}
	obj, err = decodeRow(pr.Table, pr.Row)
	return pr.Table, obj, false, err
}

// readWhole reads row with read when read takes all of it and it is not
// null (what decodeRow would refuse or decode otherwise is left to it).
func readWhole[T any](row []byte, read func(*plainjson.Scanner) (*T, bool)) (*T, bool) {
	p := plainjson.Scanner{B: row}
	v, ok := read(&p)
	return v, ok && v != nil && p.Done()
}

// readEventRow reads an event row as json.Marshal writes it.
func readEventRow(p *plainjson.Scanner) (*eventRow, bool) {
	return plainjson.Object(p, func(r *eventRow, k []byte) (uint, bool) {
		var ok bool
		switch string(k) {
		case "seq":
			r.Seq, ok = p.Uint(math.MaxUint64)
			return 0, ok
		case "index":
			r.Index, ok = p.Uint(math.MaxUint64)
			return 1, ok
		case "ring":
			return 2, p.StrTo(&r.Ring)
		case "ring_seq":
			r.RingSeq, ok = p.Uint(math.MaxUint64)
			return 3, ok
		case "event":
			r.Event, ok = structs.ReadEventJSON(p)
			return 4, ok
		}
		return 0, false // unknown here
	})
}

// jsonSpace is the white space JSON allows around a value: not \v, \f or
// Unicode's spaces, which bytes.TrimSpace also trims and encoding/json
// refuses (a row padded with them was restored).
const jsonSpace = " \t\r\n"

// splitPersistRow cuts {"t":"TABLE","r":ROW} into the table name (one of
// persistTables, so later code shares the constant) and ROW. It does not
// check ROW: decodeRow refuses anything but one JSON value there, so a
// line it accepts is exactly that object.
func splitPersistRow(line []byte) (string, []byte, bool) {
	line = bytes.Trim(line, jsonSpace)
	rest, ok := bytes.CutPrefix(line, []byte(`{"t":"`))
	if !ok {
		return "", nil, false
	}
	name, rest, ok := bytes.Cut(rest, []byte(`","r":`))
	if !ok {
		return "", nil, false
	}
	row, ok := bytes.CutSuffix(rest, []byte(`}`))
	if !ok {
		return "", nil, false
	}
	for _, table := range persistTables {
		if string(name) == table {
			return table, row, true
		}
	}
	return "", nil, false
}

// readLine reads one line (without the newline) into buf[:0].
func readLine(r *bufio.Reader, buf []byte) ([]byte, error) {
	return appendLine(r, buf[:0])
}

// appendLine appends one line of r, without its newline, to buf. At the end
// of the stream it returns what it read and io.EOF.
func appendLine(r *bufio.Reader, buf []byte) ([]byte, error) {
	for {
		chunk, err := r.ReadSlice('\n')
		buf = append(buf, chunk...)
		switch {
		case err == nil:
			return buf[:len(buf)-1], nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		default:
			return buf, err
		}
	}
}

// interner shares one copy of the strings a restore decodes over and over
// (namespaces, plugin and node IDs, modes, states), and of the events' maps
// of fields: JSON decoding gives every row its own. One per decoding
// goroutine, dropped after the restore. At 1,000,000 volumes it keeps
// about 50 MiB fewer strings.
type interner struct {
	strs   map[string]string
	fields fieldsTable
}

// newInterner starts a table with the access and attachment modes' package
// constants, the copies a write shares (internEnum): a volume decoded by
// the plain path (decodePlainVolume) and one decoded whole share them too.
func newInterner() *interner {
	in := &interner{strs: map[string]string{}}
	for _, v := range structs.AccessModes {
		in.strs[string(v)] = string(v)
	}
	for _, v := range structs.AttachmentModes {
		in.strs[string(v)] = string(v)
	}
	return in
}

func (in *interner) s(v string) string {
	if c, ok := in.strs[v]; ok {
		return c
	}
	in.strs[v] = v
	return v
}

// row interns the repeated fields of a decoded row (the fields a write
// interns: shareVolume and its siblings, shareEvent).
func (in *interner) row(obj any) {
	switch o := obj.(type) {
	case *structs.Volume:
		shareVolume(o, in.s)
		for _, c := range o.Claims {
			if c == nil {
				continue // refused by the restore's validation, on its goroutine
			}
			shareClaim(c, in.s)
		}
	case *structs.Alloc:
		shareAlloc(o, in.s)
	case *eventRow:
		shareEvent(o, in.s, &in.fields)
	}
}
