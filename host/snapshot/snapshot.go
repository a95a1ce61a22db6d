// Package snapshot is the operator snapshot format (`volhost operator
// snapshot save|restore`): a framed, checksummed, secret-sealed copy of the
// whole state store, read back with every row validated before anything is
// applied.
//
// A snapshot is JSON lines:
//
//	{"volhost_snapshot":2,"cluster_id":..,"index":..,"term":..,"created_at":..,"key_id":..}
//	{"t":"plugins","r":{...}}                       one line per row, tables in state.Tables order
//	{"t":"volumes","r":{...},"s":{"nonce":..,"ct":..}}  a volume's secrets, sealed, never in "r"
//	{"sha256":"<hex of every byte above>","rows":N}
//
// The trailer makes truncation detectable (no trailer, or a row count that
// does not match), the checksum makes corruption detectable, and the header
// names the cluster the snapshot came from. Secrets are sealed with
// AES-256-GCM under the cluster keyring's active key, with the volume's
// namespace and ID as additional data, so a sealed blob cannot be moved to
// another volume. Reading streams: one row is held at a time, beside the
// store being built.
//
// The raft snapshots the FSM writes are a different, unframed stream
// (host/cluster/meta.go, host/state/persist.go): they stay on the servers.
package snapshot

import (
	"bufio"
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"time"

	"github.com/volhost/volhost/host/state"
	"github.com/volhost/volhost/host/structs"
)

// FormatVersion is the framed format this binary writes and reads.
const FormatVersion = 2

// MaxLineBytes bounds one line (one row). API requests are bounded to far
// less, so a valid row never comes close; a longer line is refused before
// it is buffered further.
const MaxLineBytes = 16 << 20

// Header is the first line of a snapshot.
type Header struct {
	Format    int       `json:"volhost_snapshot"`
	ClusterID string    `json:"cluster_id"`
	Index     uint64    `json:"index"`
	Term      uint64    `json:"term"`
	CreatedAt time.Time `json:"created_at"`
	// KeyID names the keyring key the secrets are sealed with ("" when
	// the snapshot holds no secrets).
	KeyID string `json:"key_id,omitempty"`
	// KeptACL is set by Read, never written: the store Read returns
	// holds the ACL state of Options.KeepACLOf instead of the snapshot's
	// (state.Builder.KeepACLOf).
	KeptACL bool `json:"-"`
}

// Keyring gives the codec its keys: the active one to seal, any by ID to
// open (old keys stay after a rotation).
type Keyring interface {
	Active() (id string, key []byte, ok bool)
	Key(id string) ([]byte, bool)
}

// Sentinel errors, for callers (and tests) that branch on the kind.
var (
	// ErrTruncated: the stream ended before the checksum trailer.
	ErrTruncated = errors.New("snapshot is truncated")
	// ErrCorrupt: bytes do not match the checksum, or a line is not what
	// the format says.
	ErrCorrupt = errors.New("snapshot is corrupt")
	// ErrForeign: the snapshot comes from another cluster.
	ErrForeign = errors.New("snapshot is from another cluster")
	// ErrInvalidRow: a row fails the validation of the write that made it.
	ErrInvalidRow = errors.New("snapshot holds an invalid row")
	// ErrNoKey: the secrets are sealed with a key this cluster lacks.
	ErrNoKey = errors.New("snapshot secrets are sealed with an unknown key")
)

type row struct {
	Table  string          `json:"t,omitempty"`
	Row    json.RawMessage `json:"r,omitempty"`
	Sealed *sealed         `json:"s,omitempty"`
	// Trailer fields.
	SHA256 string `json:"sha256,omitempty"`
	Rows   *int   `json:"rows,omitempty"`
}

type sealed struct {
	Nonce []byte `json:"nonce"`
	CT    []byte `json:"ct"`
}

// Write writes snap as a framed snapshot to w. h.Format and h.KeyID are
// filled in here. Volumes with secrets need an active key: without one the
// write fails rather than falling back to clear text.
func Write(w io.Writer, h Header, snap *state.Snapshot, kr Keyring) error {
	h.Format = FormatVersion
	var aead cipher.AEAD
	if id, key, ok := kr.Active(); ok {
		a, err := newAEAD(key)
		if err != nil {
			return err
		}
		aead, h.KeyID = a, id
	}
	bw := bufio.NewWriter(w)
	sum := sha256.New()
	out := io.MultiWriter(bw, sum)
	if err := writeLine(out, h); err != nil {
		return err
	}
	n := 0
	lw := newRowWriter(out)
	err := snap.Rows(func(table string, obj any) error {
		var s *sealed
		if v, ok := obj.(*structs.Volume); ok && len(v.Secrets) > 0 {
			if aead == nil {
				return errors.New("snapshot: volumes hold secrets but the cluster keyring has no key yet (it is created at the first leader step-up)")
			}
			var err error
			if s, err = seal(aead, v); err != nil {
				return err
			}
			c := *v
			c.Secrets = nil
			obj = &c
		}
		n++
		return lw.write(table, obj, s)
	})
	if err != nil {
		return err
	}
	if err := writeLine(bw, row{SHA256: hex.EncodeToString(sum.Sum(nil)), Rows: &n}); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("snapshot: write: %w", err)
	}
	return nil
}

func writeLine(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("snapshot: encode: %w", err)
	}
	if _, err := w.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("snapshot: write: %w", err)
	}
	return nil
}

func newAEAD(key []byte) (cipher.AEAD, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("snapshot: key: %w", err)
	}
	return cipher.NewGCM(block)
}

// aad binds a sealed blob to its volume.
func aad(v *structs.Volume) []byte {
	return []byte("volhost-snapshot-secrets\x00" + v.Namespace + "\x00" + v.ID)
}

func seal(aead cipher.AEAD, v *structs.Volume) (*sealed, error) {
	pt, err := json.Marshal(v.Secrets)
	if err != nil {
		return nil, fmt.Errorf("snapshot: encode secrets: %w", err)
	}
	nonce := make([]byte, aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, fmt.Errorf("snapshot: nonce: %w", err)
	}
	return &sealed{Nonce: nonce, CT: aead.Seal(nil, nonce, pt, aad(v))}, nil
}

// Options say how strict Read is about where a snapshot comes from.
type Options struct {
	// ClusterID is this cluster's ID; a snapshot naming another is
	// refused with ErrForeign unless ForceForeign.
	ClusterID    string
	ForceForeign bool
	// StoreOptions are passed to the new store.
	StoreOptions []state.Option
	// MarkClaimsRestored marks the snapshot's claims restored
	// (state.Builder.MarkClaimsRestored): set when the snapshot is
	// restored over a running cluster.
	MarkClaimsRestored bool
	// KeepACLOf answers the state of the cluster the snapshot is
	// restored over: when the cluster has bootstrapped, and the snapshot
	// is its own (ClusterID) or was saved before the ACL bootstrap, the
	// restored store keeps the cluster's ACL state
	// (state.Builder.KeepACLOf) rather than reviving tokens deleted since
	// or reopening the bootstrap to whoever calls it first. It is called
	// once, after every row was read and checked, so a token deleted while
	// a slow upload ran is deleted in what is kept; an error ends the
	// read. nil: the snapshot's rows only.
	KeepACLOf func() (*state.Snapshot, error)
}

// Read reads and checks a whole snapshot and returns its header and a new
// store holding its rows. Nothing outside the returned store changes, and
// it is returned only when every row validated and the checksum matched.
func Read(r io.Reader, kr Keyring, o Options) (Header, *state.Store, error) {
	rd := &lineReader{br: bufio.NewReaderSize(r, 64<<10), sum: sha256.New()}
	var h Header
	line, err := rd.next()
	if err != nil {
		return h, nil, fmt.Errorf("snapshot header: %w", err)
	}
	if err := strictUnmarshal(line, &h); err != nil || h.Format == 0 {
		return h, nil, fmt.Errorf("%w: the first line is not a volhost snapshot header (a raft snapshot or another file?)", ErrCorrupt)
	}
	if h.Format != FormatVersion {
		return h, nil, fmt.Errorf("%w: format version %d, this binary reads %d", ErrCorrupt, h.Format, FormatVersion)
	}
	if h.ClusterID != o.ClusterID && !o.ForceForeign {
		return h, nil, fmt.Errorf("%w: it was saved by cluster %q, this is %q (restore with -force-foreign to accept it)", ErrForeign, h.ClusterID, o.ClusterID)
	}
	// The key is looked up at the first sealed row: a snapshot without
	// secrets restores anywhere its cluster check allows.
	var aead cipher.AEAD
	openKey := func() error {
		if aead != nil {
			return nil
		}
		if h.KeyID == "" {
			return fmt.Errorf("%w: sealed secrets but the header names no key", ErrCorrupt)
		}
		key, ok := kr.Key(h.KeyID)
		if !ok {
			return fmt.Errorf("%w: key %q is not in this cluster's keyring", ErrNoKey, h.KeyID)
		}
		var err error
		aead, err = newAEAD(key)
		return err
	}
	b := state.NewBuilder()
	if o.MarkClaimsRestored {
		b.MarkClaimsRestored()
	}
	for n := 2; ; n++ {
		sumBefore := rd.sum.Sum(nil)
		line, err := rd.next()
		if err != nil {
			return h, nil, fmt.Errorf("line %d: %w", n, err)
		}
		var rw row
		if err := strictUnmarshal(line, &rw); err != nil {
			return h, nil, fmt.Errorf("%w: line %d: %v", ErrCorrupt, n, err)
		}
		if rw.SHA256 != "" {
			if err := checkTrailer(rd, rw, sumBefore, b.Rows()); err != nil {
				return h, nil, err
			}
			if o.KeepACLOf != nil {
				cur, err := o.KeepACLOf()
				if err != nil {
					return h, nil, err
				}
				if h.KeptACL, err = b.KeepACLOf(cur, h.ClusterID == o.ClusterID); err != nil {
					return h, nil, err
				}
			}
			return h, b.Store(o.StoreOptions...), nil
		}
		if rw.Table == "" || rw.Row == nil {
			return h, nil, fmt.Errorf("%w: line %d is neither a row nor the trailer", ErrCorrupt, n)
		}
		obj, err := state.DecodeRow(rw.Table, rw.Row)
		if err != nil {
			return h, nil, fmt.Errorf("%w: line %d: %v", ErrCorrupt, n, err)
		}
		if rw.Sealed != nil {
			if err := openKey(); err != nil {
				return h, nil, fmt.Errorf("line %d (%s): %w", n, rw.Table, err)
			}
		}
		if err := openSecrets(aead, obj, rw.Sealed); err != nil {
			return h, nil, fmt.Errorf("line %d (%s): %w", n, rw.Table, err)
		}
		if err := b.Add(rw.Table, obj); err != nil {
			return h, nil, fmt.Errorf("%w: line %d (%s): %w", ErrInvalidRow, n, rw.Table, err)
		}
	}
}

// checkTrailer compares the trailer with what was read, and requires the
// stream to end right after it.
func checkTrailer(rd *lineReader, tr row, sum []byte, rows int) error {
	if tr.Rows == nil || *tr.Rows != rows {
		return fmt.Errorf("%w: trailer counts %v rows, %d were read", ErrCorrupt, tr.Rows, rows)
	}
	if want := hex.EncodeToString(sum); tr.SHA256 != want {
		return fmt.Errorf("%w: checksum mismatch (trailer %s, content %s)", ErrCorrupt, tr.SHA256, want)
	}
	if _, err := rd.br.Peek(1); !errors.Is(err, io.EOF) {
		if err != nil {
			return fmt.Errorf("snapshot: read: %w", err)
		}
		return fmt.Errorf("%w: data after the checksum trailer", ErrCorrupt)
	}
	return nil
}

func openSecrets(aead cipher.AEAD, obj any, s *sealed) error {
	v, ok := obj.(*structs.Volume)
	if !ok {
		if s != nil {
			return fmt.Errorf("%w: sealed secrets on a row that is not a volume", ErrCorrupt)
		}
		return nil
	}
	if len(v.Secrets) > 0 {
		return fmt.Errorf("%w: volume %s/%s carries secrets in clear text", ErrCorrupt, v.Namespace, v.ID)
	}
	if s == nil {
		return nil
	}
	if len(s.Nonce) != aead.NonceSize() {
		return fmt.Errorf("%w: bad nonce on volume %s/%s", ErrCorrupt, v.Namespace, v.ID)
	}
	pt, err := aead.Open(nil, s.Nonce, s.CT, aad(v))
	if err != nil {
		return fmt.Errorf("%w: the secrets of volume %s/%s do not open (tampered, or sealed for another volume)", ErrCorrupt, v.Namespace, v.ID)
	}
	if err := json.Unmarshal(pt, &v.Secrets); err != nil {
		return fmt.Errorf("%w: secrets of volume %s/%s: %v", ErrCorrupt, v.Namespace, v.ID, err)
	}
	return nil
}

// strictUnmarshal refuses unknown fields, so a line of another format is
// not half-read as this one.
func strictUnmarshal(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("more than one JSON value on the line")
	}
	return nil
}

// lineReader hands out lines (without the newline), bounded in length,
// hashing every byte it hands out.
type lineReader struct {
	br  *bufio.Reader
	sum hash.Hash
	buf []byte
}

func (l *lineReader) next() ([]byte, error) {
	l.buf = l.buf[:0]
	for {
		frag, err := l.br.ReadSlice('\n')
		if len(l.buf)+len(frag) > MaxLineBytes {
			return nil, fmt.Errorf("%w: a line is longer than %d bytes", ErrCorrupt, MaxLineBytes)
		}
		l.buf = append(l.buf, frag...)
		switch {
		case err == nil:
			l.sum.Write(l.buf)
			return l.buf[:len(l.buf)-1], nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF):
			// A last line without its newline is cut short too.
			return nil, fmt.Errorf("%w: it ends before the checksum trailer", ErrTruncated)
		default:
			return nil, fmt.Errorf("snapshot: read: %w", err)
		}
	}
}
