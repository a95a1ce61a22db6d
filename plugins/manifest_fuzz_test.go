package plugins

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/volhost/volhost/abi"
)

// FuzzParseManifest: a NAME.hcl of any bytes is a manifest or one error
// naming the file, never a panic; an accepted one is within its own
// bounds, its selectors match without error, and rendered back to HCL it
// parses to the same manifest (so what the host acts on is what the file
// says, nothing lost or added by defaults).
func FuzzParseManifest(f *testing.F) {
	seeds, _ := filepath.Glob("testdata/manifests/*.hcl")
	more, _ := filepath.Glob("../examples/plugins/*/*.hcl")
	for _, p := range append(seeds, more...) {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("kind = \"csi-adapter\"\nmode = \"shadow\"\non_failure = \"native\"\nrollback {\n max_faults = 2\n window = \"1m30s\"\n}\n"))
	f.Fuzz(func(t *testing.T, src []byte) {
		m, err := ParseManifest("fuzz.hcl", src)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "manifest fuzz.hcl") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		l := m.Limits
		if l.MemoryPages < 1 || l.MemoryPages > 65536 || l.CallTimeout <= 0 || l.PoolSize < 1 || l.MaxCalls < 1 || l.TableElements < 1 {
			t.Fatalf("accepted limits out of bounds: %+v", l)
		}
		if m.Kind != abi.KindReleasePolicy && m.Kind != abi.KindCSIAdapter {
			t.Fatalf("accepted kind %q", m.Kind)
		}
		_ = m.CheckMaxima(Maxima{})
		_ = m.Selects(Target{Namespace: "default", VolumeID: "v", PluginID: "p"})
		again, err := ParseManifest("fuzz.hcl", []byte(renderManifest(m)))
		if err != nil {
			t.Fatalf("the manifest rendered back does not parse: %v\n%s", err, renderManifest(m))
		}
		if !reflect.DeepEqual(normal(m), normal(again)) {
			t.Fatalf("round trip:\n got %+v\nwant %+v", again, m)
		}
	})
}

// normal makes empty and nil lists and maps the same.
func normal(m *Manifest) Manifest {
	c := *m
	if len(c.PluginIDs) == 0 {
		c.PluginIDs = nil
	}
	if len(c.Volumes) == 0 {
		c.Volumes = nil
	}
	if len(c.Config) == 0 {
		c.Config = nil
	}
	return c
}

// renderManifest writes m as HCL, every attribute explicit.
func renderManifest(m *Manifest) string {
	var b strings.Builder
	list := func(xs []string) string {
		q := make([]string, len(xs))
		for i, x := range xs {
			q[i] = hclQuote(x)
		}
		return "[" + strings.Join(q, ", ") + "]"
	}
	fmt.Fprintf(&b, "kind = %s\nversion = %s\nplugin_ids = %s\nvolumes = %s\ndefault = %v\n",
		hclQuote(string(m.Kind)), hclQuote(m.Version), list(m.PluginIDs), list(m.Volumes), m.Default)
	fmt.Fprintf(&b, "sha256 = %s\nmode = %s\non_failure = %s\n", hclQuote(m.SHA256), hclQuote(m.Mode), hclQuote(m.OnFailure))
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range m.Config {
			if !yield(k) {
				return
			}
		}
	})
	b.WriteString("config = {\n")
	for _, k := range keys {
		fmt.Fprintf(&b, "  %s = %s\n", hclQuote(k), hclQuote(m.Config[k]))
	}
	b.WriteString("}\n")
	l := m.Limits
	fmt.Fprintf(&b, "limits {\n  memory_pages = %d\n  call_timeout = %q\n  pool_size = %d\n  max_calls = %d\n  table_elements = %d\n}\n",
		l.MemoryPages, l.CallTimeout.String(), l.PoolSize, l.MaxCalls, l.TableElements)
	fmt.Fprintf(&b, "rollback {\n  max_faults = %d\n  window = %q\n}\n", m.Rollback.MaxFaults, m.Rollback.Window.String())
	return b.String()
}

// hclQuote renders s as an HCL quoted string: HCL's escapes, and its
// template sequences ${ and %{ doubled.
func hclQuote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i, r := range s {
		switch {
		case r == '"', r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case (r == '$' || r == '%') && strings.HasPrefix(s[i+1:], "{"):
			b.WriteRune(r)
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f || r == utf8.RuneError:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}
