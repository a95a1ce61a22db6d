package structs

import (
	"go/ast"
	"go/parser"
	"go/token"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestEventTypesListsEveryConstant reads the Event* string constants of
// structs.go from its source, so a type added there without a place in
// EventTypes (and so refused by ?type=) fails here.
func TestEventTypesListsEveryConstant(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "structs.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var consts []string
	for _, d := range f.Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, spec := range gd.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, n := range vs.Names {
				if !strings.HasPrefix(n.Name, "Event") || i >= len(vs.Values) {
					continue
				}
				lit, ok := vs.Values[i].(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					continue
				}
				v, err := strconv.Unquote(lit.Value)
				if err != nil {
					t.Fatal(err)
				}
				consts = append(consts, v)
			}
		}
	}
	if len(consts) < 11 {
		t.Fatalf("found only %d Event constants (%v): the parse is wrong", len(consts), consts)
	}
	for _, c := range consts {
		if !slices.Contains(EventTypes, c) {
			t.Errorf("event type %q is a constant but not in EventTypes", c)
		}
		if !ValidEventType(c) {
			t.Errorf("ValidEventType(%q) = false", c)
		}
	}
	if len(EventTypes) != len(consts) {
		t.Errorf("EventTypes has %d entries, structs.go %d Event constants: %v", len(EventTypes), len(consts), EventTypes)
	}
	for _, bad := range []string{"", "zzz", "Audit", "claim"} {
		if ValidEventType(bad) {
			t.Errorf("ValidEventType(%q) = true", bad)
		}
	}
}

// TestClaimDefaultModes: a claim naming no access or attachment mode gets
// its volume's; one naming its own keeps it.
func TestClaimDefaultModes(t *testing.T) {
	v := &Volume{AccessMode: AccessSingleNodeWriter, AttachmentMode: AttachFilesystem}
	c := &Claim{}
	c.DefaultModes(v)
	if c.AccessMode != AccessSingleNodeWriter || c.AttachmentMode != AttachFilesystem {
		t.Fatalf("a claim naming no mode: %s %s, want the volume's", c.AccessMode, c.AttachmentMode)
	}
	c = &Claim{AccessMode: AccessMultiNodeReader, AttachmentMode: AttachBlockDevice}
	c.DefaultModes(v)
	if c.AccessMode != AccessMultiNodeReader || c.AttachmentMode != AttachBlockDevice {
		t.Fatalf("a claim naming its modes: %s %s, want its own", c.AccessMode, c.AttachmentMode)
	}
}

// TestVolumeClaimIDs: a volume's claims in allocation ID order, so a walk
// that stops at one names the same one on every replica.
func TestVolumeClaimIDs(t *testing.T) {
	v := &Volume{Claims: map[string]*Claim{"web-3": {}, "db-1": {}, "web-10": {}, "api": {}}}
	for range 5 { // map order varies from one range to the next
		if got := v.ClaimIDs(); !slices.Equal(got, []string{"api", "db-1", "web-10", "web-3"}) {
			t.Fatalf("ClaimIDs = %v", got)
		}
	}
	if got := (&Volume{}).ClaimIDs(); len(got) != 0 {
		t.Fatalf("no claims: %v", got)
	}
}
