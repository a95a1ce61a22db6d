// Command gen writes volhost's wire codecs from abi/volhost.proto: the Go
// messages and codec (abi/codec_gen.go, after the hand-written helpers in
// codec.go.tmpl beside this file) and the AssemblyScript SDK's
// (abi/guest-as/assembly/messages.ts). `go generate ./abi/...` runs it;
// `make lint` runs it again and fails if anything changed.
//
// Why generate, and why this way. Both codecs are straight-line on purpose
// (every branch and loop iteration costs a guest a timeout probe, ABI.md
// section 12), which written by hand made them the largest repetition in
// the repository and made every new message three hand edits. The
// generator writes the same straight-line code from one schema, like
// vtprotobuf's unrolled marshalling, with protoc-gen-go's conventions: a
// "Code generated ... DO NOT EDIT." first line, and output that depends on
// the schema only (fields in number order, no maps iterated, gofmt'd).
//
// The schema is read with github.com/emicklei/proto, a parser only: the
// generator needs the messages, fields and options, not descriptors. The
// per-message forms (short_encode, reuse, loop_only, usual, fresh) are
// options declared in volhost.proto itself; ABI.md section 6 "Generated
// codecs" says what each one writes.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/emicklei/proto"
)

func main() {
	protoPath := flag.String("proto", "volhost.proto", "the schema")
	goOut := flag.String("go", "codec_gen.go", "the Go file to write")
	asOut := flag.String("as", "guest-as/assembly/messages.ts", "the AssemblyScript file to write")
	flag.Parse()
	if err := run(*protoPath, *goOut, *asOut); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

func run(protoPath, goOut, asOut string) error {
	s, err := load(protoPath)
	if err != nil {
		return err
	}
	goSrc, err := genGo(s, filepath.Base(protoPath))
	if err != nil {
		return err
	}
	if err := writeIfChanged(goOut, goSrc); err != nil {
		return err
	}
	return writeIfChanged(asOut, genAS(s, filepath.Base(protoPath)))
}

// writeIfChanged leaves an unchanged file alone, so its modification time
// does not make scripts/build-plugins.sh rebuild the modules.
func writeIfChanged(path string, b []byte) error {
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, b) {
		return nil
	}
	return os.WriteFile(path, b, 0o644)
}

// kind is a field's type as the codecs see it.
type kind int

const (
	kString kind = iota
	kInt64
	kUint32
	kBool
	kEnum
	kMessage
	kMap // map<string, string>
)

// varint reports whether a singular field of kind k travels as a varint.
func (k kind) varint() bool { return k == kInt64 || k == kUint32 || k == kBool || k == kEnum }

type field struct {
	Name     string // proto name, snake_case
	Num      int
	Kind     kind
	Repeated bool
	Type     string // message or enum name
	Fresh    bool
	Doc      []string // leading comment lines
	Trailing string   // the comment on the field's line
}

type message struct {
	Name        string
	Fields      []*field
	Doc         []string
	ShortEncode bool
	Reuse       bool
	LoopOnly    bool
	Usual       []*field // the usual form's fields, in number order
	Nested      bool     // some message has a field of this type
	Fresh       bool     // some fresh field has this type: it needs decodeFresh
}

type enumValue struct {
	Name     string
	Num      int
	Trailing string
}

type enum struct {
	Name   string
	Doc    []string
	Values []enumValue
}

type schema struct {
	Header   []string // the file's first comment
	Messages []*message
	Enums    []*enum
	byName   map[string]*message
}

func load(path string) (*schema, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	def, err := proto.NewParser(f).Parse()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	s := &schema{byName: map[string]*message{}}
	enums := map[string]bool{}
	for _, e := range def.Elements {
		if c, ok := e.(*proto.Comment); ok && s.Header == nil {
			s.Header = lines(c)
		}
		if en, ok := e.(*proto.Enum); ok {
			out := &enum{Name: en.Name, Doc: lines(en.Comment)}
			for _, v := range en.Elements {
				if ef, ok := v.(*proto.EnumField); ok {
					out.Values = append(out.Values, enumValue{ef.Name, ef.Integer, strings.Join(lines(ef.InlineComment), " ")})
				}
			}
			s.Enums = append(s.Enums, out)
			enums[en.Name] = true
		}
	}
	for _, e := range def.Elements {
		pm, ok := e.(*proto.Message)
		if !ok || pm.IsExtend {
			continue
		}
		m := &message{Name: pm.Name, Doc: lines(pm.Comment)}
		var usual, fresh string
		for _, el := range pm.Elements {
			switch el := el.(type) {
			case *proto.Option:
				switch el.Name {
				case "(short_encode)":
					m.ShortEncode = el.Constant.Source == "true"
				case "(reuse)":
					m.Reuse = el.Constant.Source == "true"
				case "(loop_only)":
					m.LoopOnly = el.Constant.Source == "true"
				case "(usual)":
					usual = el.Constant.Source
				case "(fresh)":
					fresh = el.Constant.Source
				default:
					return nil, fmt.Errorf("%s: option %s: unknown", m.Name, el.Name)
				}
			case *proto.NormalField:
				f := &field{Name: el.Name, Num: el.Sequence, Repeated: el.Repeated, Type: el.Type,
					Doc: lines(el.Comment), Trailing: strings.Join(lines(el.InlineComment), " ")}
				switch el.Type {
				case "string":
					f.Kind = kString
				case "int64":
					f.Kind = kInt64
				case "uint32":
					f.Kind = kUint32
				case "bool":
					f.Kind = kBool
				default:
					if enums[el.Type] {
						f.Kind = kEnum
					} else {
						f.Kind = kMessage
					}
				}
				m.Fields = append(m.Fields, f)
			case *proto.MapField:
				if el.KeyType != "string" || el.Type != "string" {
					return nil, fmt.Errorf("%s.%s: only map<string, string> is supported", m.Name, el.Name)
				}
				m.Fields = append(m.Fields, &field{Name: el.Name, Num: el.Sequence, Kind: kMap,
					Doc: lines(el.Comment), Trailing: strings.Join(lines(el.InlineComment), " ")})
			}
		}
		sort.SliceStable(m.Fields, func(i, j int) bool { return m.Fields[i].Num < m.Fields[j].Num })
		for _, name := range strings.Fields(usual) {
			f := m.field(name)
			if f == nil {
				return nil, fmt.Errorf("%s: usual names %q, not a field", m.Name, name)
			}
			m.Usual = append(m.Usual, f)
		}
		for _, name := range strings.Fields(fresh) {
			f := m.field(name)
			if f == nil {
				return nil, fmt.Errorf("%s: fresh names %q, not a field", m.Name, name)
			}
			f.Fresh = true
		}
		sort.SliceStable(m.Usual, func(i, j int) bool { return m.Usual[i].Num < m.Usual[j].Num })
		s.Messages = append(s.Messages, m)
		s.byName[m.Name] = m
	}
	for _, m := range s.Messages {
		for _, f := range m.Fields {
			if f.Kind != kMessage {
				continue
			}
			t := s.byName[f.Type]
			if t == nil {
				return nil, fmt.Errorf("%s.%s: unknown type %s", m.Name, f.Name, f.Type)
			}
			t.Nested = true
			if f.Fresh {
				t.Fresh = true
			}
		}
	}
	return s, s.check()
}

// check refuses what the generated forms cannot express, with the reason.
func (s *schema) check() error {
	for _, m := range s.Messages {
		if m.LoopOnly && (m.Reuse || m.ShortEncode || len(m.Usual) > 0) {
			return fmt.Errorf("%s: loop_only excludes the other forms", m.Name)
		}
		for _, f := range m.Fields {
			if f.Num < 1 || f.Num > 15 {
				// Every tag the fast paths compare is one byte, and
				// openNested reserves one.
				return fmt.Errorf("%s.%s: field number %d: the codecs take fields 1..15 (one-byte tags)", m.Name, f.Name, f.Num)
			}
			if f.Repeated && f.Kind != kString && f.Kind != kMessage {
				return fmt.Errorf("%s.%s: repeated %s: only repeated string and message fields are supported", m.Name, f.Name, f.Type)
			}
			if f.Fresh && f.Kind != kMessage {
				return fmt.Errorf("%s.%s: fresh is for message fields", m.Name, f.Name)
			}
			if f.Fresh && !f.Repeated && m.Nested {
				// decodeFresh replaces the value; a singular field of a
				// message merged twice (proto3 merge) must merge instead.
				return fmt.Errorf("%s.%s: a singular fresh field needs a top-level message", m.Name, f.Name)
			}
		}
		if m.ShortEncode {
			for _, f := range m.Fields {
				if f.Repeated || f.Kind == kMessage {
					return fmt.Errorf("%s: short_encode takes scalar, string and map fields only", m.Name)
				}
			}
		}
		if m.Fresh {
			for _, f := range m.Fields {
				if f.Kind == kMessage {
					return fmt.Errorf("%s: decoded fresh, so it may not have message fields", m.Name)
				}
			}
		}
		for _, f := range m.Usual {
			if f.Repeated || (f.Kind != kString && f.Kind != kUint32 && f.Kind != kEnum) {
				return fmt.Errorf("%s.%s: usual takes singular string, uint32 and enum fields", m.Name, f.Name)
			}
		}
		if len(m.Usual) > 0 {
			for _, f := range m.Fields {
				if f.Kind == kMessage || f.Kind == kMap || f.Repeated {
					return fmt.Errorf("%s: usual takes messages of scalar and string fields", m.Name)
				}
			}
		}
		if m.Reuse {
			// The repeated message fields are one run: the fast path
			// decodes them into locals stored together.
			first, last := -1, -1
			for i, f := range m.Fields {
				if f.Repeated && f.Kind == kMessage {
					if first < 0 {
						first = i
					}
					last = i
				}
			}
			for i := first + 1; first >= 0 && i < last; i++ {
				if f := m.Fields[i]; !f.Repeated || f.Kind != kMessage {
					return fmt.Errorf("%s: reuse needs its repeated message fields to be consecutive", m.Name)
				}
			}
		}
	}
	return nil
}

func (m *message) field(name string) *field {
	for _, f := range m.Fields {
		if f.Name == name {
			return f
		}
	}
	return nil
}

func (m *message) hasVarint() bool {
	for _, f := range m.Fields {
		if !f.Repeated && f.Kind.varint() {
			return true
		}
	}
	return false
}

func lines(c *proto.Comment) []string {
	if c == nil {
		return nil
	}
	out := make([]string, 0, len(c.Lines))
	for _, l := range c.Lines {
		out = append(out, strings.TrimPrefix(l, " "))
	}
	return out
}

// goName is a proto name in Go's spelling: snake_case to CamelCase, with
// "id" as ID (module_name ModuleName, external_node_id ExternalNodeID).
func goName(s string) string {
	var b strings.Builder
	for _, p := range strings.Split(strings.ToLower(s), "_") {
		if p == "id" {
			b.WriteString("ID")
		} else if p != "" {
			b.WriteString(strings.ToUpper(p[:1]) + p[1:])
		}
	}
	return b.String()
}

// asName is a proto name in the AssemblyScript SDK's spelling: camelCase
// (external_node_id externalNodeId).
func asName(s string) string {
	var b strings.Builder
	for i, p := range strings.Split(s, "_") {
		if i == 0 {
			b.WriteString(p)
		} else if p != "" {
			b.WriteString(strings.ToUpper(p[:1]) + p[1:])
		}
	}
	return b.String()
}
