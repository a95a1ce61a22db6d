package snapshot

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/volhost/volhost/host/state"
	"github.com/volhost/volhost/host/structs"
)

// testKeyring is a fixed keyring for the codec tests.
type testKeyring map[string][]byte

func (k testKeyring) Active() (string, []byte, bool) {
	b, ok := k["k1"]
	return "k1", b, ok
}
func (k testKeyring) Key(id string) ([]byte, bool) { b, ok := k[id]; return b, ok }

func newKeyring(t testing.TB) testKeyring {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	return testKeyring{"k1": key}
}

const secret = "hunter2-do-not-leak"

// testStore holds one of every row kind, and a volume with secrets.
func testStore(t testing.TB) *state.Store {
	t.Helper()
	s := state.NewStore()
	idx := uint64(10)
	must := func(mt structs.MessageType, req any) {
		t.Helper()
		idx++
		if _, err := s.Apply(idx, mt, req); err != nil {
			t.Fatalf("apply %d: %v", mt, err)
		}
	}
	must(structs.PluginUpsertType, &structs.PluginUpsertRequest{Plugin: &structs.Plugin{ID: "ebs", ControllerEndpoint: "tcp://127.0.0.1:9000"}})
	must(structs.NodeUpsertType, &structs.NodeUpsertRequest{Node: &structs.Node{ID: "n1", Status: structs.NodeReady,
		Plugins: map[string]*structs.NodePlugin{"ebs": {PluginID: "ebs", Endpoint: "unix:///run/csi.sock"}}}})
	must(structs.AllocUpsertType, &structs.AllocUpsertRequest{Allocs: []*structs.Alloc{
		{ID: "a1", Namespace: "default", NodeID: "n1", ClientStatus: structs.AllocRunning}}})
	must(structs.VolumeRegisterType, &structs.VolumeRegisterRequest{Volumes: []*structs.Volume{
		{Namespace: "default", ID: "v1", ExternalID: "vol-1", PluginID: "ebs", AccessMode: structs.AccessSingleNodeWriter,
			AttachmentMode: structs.AttachFilesystem, Secrets: map[string]string{"password": secret}},
		{Namespace: "default", ID: "v2", ExternalID: "vol-2", PluginID: "ebs", AccessMode: structs.AccessSingleNodeWriter,
			AttachmentMode: structs.AttachFilesystem, Secrets: map[string]string{"password": "other"}},
	}})
	must(structs.VolumeClaimType, &structs.VolumeClaimRequest{Namespace: "default", VolumeID: "v1",
		Claim: &structs.Claim{AllocID: "a1", NodeID: "n1", Mode: structs.ClaimWrite}})
	// ACL rows too: a snapshot restores tokens and policies (hashes only).
	must(structs.ACLBootstrapType, &structs.ACLBootstrapRequest{Token: &structs.ACLToken{
		AccessorID: "boot", SecretHash: strings.Repeat("a", 64), Type: structs.ACLManagementToken}})
	must(structs.ACLPolicyUpsertType, &structs.ACLPolicyUpsertRequest{Actor: "boot",
		Policies: []*structs.ACLPolicy{{Name: "ops", Rules: `operator { policy = "read" }`}}})
	must(structs.ACLTokenUpsertType, &structs.ACLTokenUpsertRequest{Actor: "boot",
		Tokens: []*structs.ACLToken{{AccessorID: "t1", SecretHash: strings.Repeat("b", 64), Type: structs.ACLClientToken, Policies: []string{"ops"}}}})
	return s
}

func save(t testing.TB, s *state.Store, kr Keyring, cluster string) []byte {
	t.Helper()
	var buf bytes.Buffer
	h := Header{ClusterID: cluster, Index: s.LatestIndex(), Term: 3, CreatedAt: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)}
	if err := Write(&buf, h, s.Snapshot(), kr); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func digest(t testing.TB, s *state.Store) string {
	t.Helper()
	d, err := s.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestRoundTripSealsSecrets(t *testing.T) {
	kr := newKeyring(t)
	s := testStore(t)
	raw := save(t, s, kr, "c1")
	if bytes.Contains(raw, []byte(secret)) || bytes.Contains(raw, []byte("password")) {
		t.Fatalf("snapshot carries a secret in clear text:\n%s", raw)
	}
	h, got, err := Read(bytes.NewReader(raw), kr, Options{ClusterID: "c1"})
	if err != nil {
		t.Fatal(err)
	}
	if h.ClusterID != "c1" || h.Index != s.LatestIndex() || h.Term != 3 || h.KeyID != "k1" || h.Format != FormatVersion {
		t.Fatalf("header %+v", h)
	}
	if digest(t, got) != digest(t, s) {
		t.Fatal("restored state differs from the saved one")
	}
	v, _ := got.Snapshot().VolumeByID(nil, "default", "v1")
	if v.Secrets["password"] != secret {
		t.Fatalf("secrets not restored: %v", v.Secrets)
	}
}

// rewrite edits the rows of a snapshot with fn and recomputes the trailer,
// as a careful hand editor would: the checksum then matches and only the
// row validation can catch the edit.
func rewrite(t *testing.T, raw []byte, fn func(lines [][]byte) [][]byte) []byte {
	t.Helper()
	lines := bytes.Split(bytes.TrimSuffix(raw, []byte("\n")), []byte("\n"))
	body := fn(lines[:len(lines)-1])
	var out bytes.Buffer
	for _, l := range body {
		out.Write(l)
		out.WriteByte('\n')
	}
	n := len(body) - 1
	sum := sha256Hex(out.Bytes())
	tr, _ := json.Marshal(row{SHA256: sum, Rows: &n})
	out.Write(append(tr, '\n'))
	return out.Bytes()
}

func TestReadRefuses(t *testing.T) {
	kr := newKeyring(t)
	good := save(t, testStore(t), kr, "c1")
	lines := bytes.SplitAfter(good, []byte("\n"))
	head := bytes.Join(lines[:4], nil) // `head -n 4 good.snap`
	flipped := bytes.Clone(good)
	i := bytes.Index(flipped, []byte("vol-1"))
	flipped[i+4] = '9'

	volLine := func(ls [][]byte, id string) int {
		for i, l := range ls {
			if bytes.Contains(l, []byte(`"t":"volumes"`)) && bytes.Contains(l, []byte(`"id":"`+id+`"`)) {
				return i
			}
		}
		t.Fatalf("no volume row %s", id)
		return -1
	}
	cases := []struct {
		name string
		in   []byte
		o    Options
		kr   Keyring
		want error
		msg  string
	}{
		{"empty", nil, Options{ClusterID: "c1"}, kr, ErrTruncated, "ends before the checksum trailer"},
		{"truncated at a line", head, Options{ClusterID: "c1"}, kr, ErrTruncated, "truncated"},
		{"truncated mid line", good[:len(good)-10], Options{ClusterID: "c1"}, kr, ErrTruncated, "truncated"},
		{"corrupted byte", flipped, Options{ClusterID: "c1"}, kr, ErrCorrupt, "checksum mismatch"},
		{"trailing data", append(bytes.Clone(good), "{}\n"...), Options{ClusterID: "c1"}, kr, ErrCorrupt, "after the checksum trailer"},
		{"raft snapshot", []byte(`{"volhost_cluster":1,"cluster_id":"c1"}` + "\n"), Options{ClusterID: "c1"}, kr, ErrCorrupt, "not a volhost snapshot header"},
		{"foreign", good, Options{ClusterID: "c2"}, kr, ErrForeign, `saved by cluster "c1"`},
		{"unknown key", good, Options{ClusterID: "c1"}, testKeyring{"k9": kr["k1"]}, nil, ""},
		{"wrong key material", good, Options{ClusterID: "c1"}, newKeyring(t), ErrCorrupt, "do not open"},
		{"invalid alloc ID", rewrite(t, good, func(ls [][]byte) [][]byte {
			for i, l := range ls {
				if bytes.Contains(l, []byte(`"t":"allocs"`)) {
					ls[i] = bytes.Replace(l, []byte(`"id":"a1"`), []byte(`"id":".."`), 1)
				}
			}
			return ls
		}), Options{ClusterID: "c1"}, kr, ErrInvalidRow, "allocs[0].id"},
		{"invisible character in a node ID", rewrite(t, good, func(ls [][]byte) [][]byte {
			for i, l := range ls {
				if bytes.Contains(l, []byte(`"t":"nodes"`)) {
					ls[i] = bytes.Replace(l, []byte(`"id":"n1"`), []byte(`"id":"n\u200b1"`), 1)
				}
			}
			return ls
		}), Options{ClusterID: "c1"}, kr, ErrInvalidRow, "U+200B"},
		{"volume ID renamed", rewrite(t, good, func(ls [][]byte) [][]byte {
			i := volLine(ls, "v2")
			ls[i] = bytes.Replace(ls[i], []byte(`"id":"v2"`), []byte(`"id":".."`), 1)
			return ls
		}), Options{ClusterID: "c1"}, kr, ErrCorrupt, "do not open"},
		{"secrets moved to another volume", rewrite(t, good, func(ls [][]byte) [][]byte {
			i, j := volLine(ls, "v1"), volLine(ls, "v2")
			var a, b row
			_ = json.Unmarshal(ls[i], &a)
			_ = json.Unmarshal(ls[j], &b)
			a.Sealed, b.Sealed = b.Sealed, a.Sealed
			ls[i], _ = json.Marshal(a)
			ls[j], _ = json.Marshal(b)
			return ls
		}), Options{ClusterID: "c1"}, kr, ErrCorrupt, "do not open"},
		{"clear-text secrets", rewrite(t, good, func(ls [][]byte) [][]byte {
			i := volLine(ls, "v2")
			ls[i] = bytes.Replace(ls[i], []byte(`"id":"v2"`), []byte(`"id":"v2","secrets":{"k":"v"}`), 1)
			return ls
		}), Options{ClusterID: "c1"}, kr, ErrCorrupt, "clear text"},
		{"duplicate row", rewrite(t, good, func(ls [][]byte) [][]byte {
			i := volLine(ls, "v2")
			return append(ls[:i+1], ls[i:]...)
		}), Options{ClusterID: "c1"}, kr, ErrInvalidRow, "duplicate row"},
		{"claim on a bad state", rewrite(t, good, func(ls [][]byte) [][]byte {
			i := volLine(ls, "v1")
			ls[i] = bytes.Replace(ls[i], []byte(`"state":"taken"`), []byte(`"state":"gone"`), 1)
			return ls
		}), Options{ClusterID: "c1"}, kr, ErrInvalidRow, "unknown claim state"},
		{"line too long", append(append([]byte(nil), lines[0]...), bytes.Repeat([]byte("x"), MaxLineBytes+1)...), Options{ClusterID: "c1"}, kr, ErrCorrupt, "longer than"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, st, err := Read(bytes.NewReader(c.in), c.kr, c.o)
			if st != nil || err == nil {
				t.Fatalf("accepted: %v", err)
			}
			if c.name == "unknown key" {
				if !errors.Is(err, ErrNoKey) {
					t.Fatalf("got %v, want ErrNoKey", err)
				}
				return
			}
			if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.msg) {
				t.Fatalf("got %v, want %v mentioning %q", err, c.want, c.msg)
			}
		})
	}
}

func TestForceForeignSkipsOnlyTheClusterCheck(t *testing.T) {
	kr := newKeyring(t)
	good := save(t, testStore(t), kr, "c1")
	if _, _, err := Read(bytes.NewReader(good), kr, Options{ClusterID: "c2", ForceForeign: true}); err != nil {
		t.Fatalf("forced foreign restore: %v", err)
	}
	bad := bytes.Clone(good)
	bad[len(bad)-5] ^= 1
	if _, _, err := Read(bytes.NewReader(bad), kr, Options{ClusterID: "c2", ForceForeign: true}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("forced foreign restore of a corrupt file: %v", err)
	}
}

func TestWriteWithoutKeyRefusesSecrets(t *testing.T) {
	var buf bytes.Buffer
	err := Write(&buf, Header{}, testStore(t).Snapshot(), testKeyring{})
	if err == nil || !strings.Contains(err.Error(), "keyring has no key") {
		t.Fatalf("got %v", err)
	}
	if bytes.Contains(buf.Bytes(), []byte(secret)) {
		t.Fatal("secret written in clear text")
	}
}
