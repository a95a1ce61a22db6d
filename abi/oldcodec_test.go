package abi

import (
	"bytes"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"unsafe"

	"github.com/volhost/volhost/abi/internal/oldcodec"
)

// The hand-written codec (abi/internal/oldcodec, kept until this comparison
// has passed) against the generated one. The two packages declare the same
// types field for field, so a generated value is read as the hand-written
// one in place.

type oldMessage interface {
	MarshalAppend(b []byte) []byte
	Unmarshal(b []byte) error
}

var oldTypes = map[string]reflect.Type{
	"ConfigureRequest": reflect.TypeFor[oldcodec.ConfigureRequest](), "ConfigureResponse": reflect.TypeFor[oldcodec.ConfigureResponse](),
	"VolumeView": reflect.TypeFor[oldcodec.VolumeView](), "ClaimView": reflect.TypeFor[oldcodec.ClaimView](),
	"AllocView": reflect.TypeFor[oldcodec.AllocView](), "NodeView": reflect.TypeFor[oldcodec.NodeView](),
	"PolicyRequest": reflect.TypeFor[oldcodec.PolicyRequest](), "Decision": reflect.TypeFor[oldcodec.Decision](),
	"PolicyResponse": reflect.TypeFor[oldcodec.PolicyResponse](), "PluginView": reflect.TypeFor[oldcodec.PluginView](),
	"AdapterRequest": reflect.TypeFor[oldcodec.AdapterRequest](), "AdapterResponse": reflect.TypeFor[oldcodec.AdapterResponse](),
	"ClassifyRequest": reflect.TypeFor[oldcodec.ClassifyRequest](), "ClassifyResponse": reflect.TypeFor[oldcodec.ClassifyResponse](),
	"FenceRequest": reflect.TypeFor[oldcodec.FenceRequest](), "FenceResponse": reflect.TypeFor[oldcodec.FenceResponse](),
}

// asOld reads generated message m as its hand-written type.
func asOld(m Message) oldMessage {
	v := reflect.ValueOf(m)
	return reflect.NewAt(oldTypes[v.Elem().Type().Name()], unsafe.Pointer(v.Pointer())).Interface().(oldMessage)
}

var oldCodec = wireCodec{
	encode: func(m Message) []byte { return asOld(m).MarshalAppend(nil) },
	decode: func(name string, b []byte) ([]byte, error) {
		m := reflect.New(oldTypes[name]).Interface().(oldMessage)
		if err := m.Unmarshal(b); err != nil {
			return nil, err
		}
		return m.MarshalAppend(nil), nil
	},
}

// TestOldTypesMatch: the generated types are the hand-written ones, field
// for field (names, types, order), so asOld is sound.
func TestOldTypesMatch(t *testing.T) {
	for name, m := range full() {
		nt, ot := reflect.TypeOf(m).Elem(), oldTypes[name]
		if nt.NumField() != ot.NumField() || nt.Size() != ot.Size() {
			t.Fatalf("%s: %d fields, %d bytes; hand-written %d, %d", name, nt.NumField(), nt.Size(), ot.NumField(), ot.Size())
		}
		for i := range nt.NumField() {
			nf, of := nt.Field(i), ot.Field(i)
			if nf.Name != of.Name || nf.Offset != of.Offset || nf.Type.Kind() != of.Type.Kind() || nf.Type.Name() != of.Type.Name() {
				t.Errorf("%s field %d: %s %s, hand-written %s %s", name, i, nf.Name, nf.Type, of.Name, of.Type)
			}
		}
	}
}

func TestGeneratedMatchesHandWritten(t *testing.T) {
	got, want := wireLines(t, generatedCodec), wireLines(t, oldCodec)
	if len(got) != len(want) {
		t.Fatalf("%d lines, hand-written %d", len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			t.Errorf("generated   %s\nhand-written %s", got[i], want[i])
		}
	}
	t.Logf("%d lines compared", len(got))
}

// FuzzGeneratedMatchesHandWritten decodes arbitrary bytes as every message
// with both codecs: the same error or the same value, which both encode to
// the same bytes.
func FuzzGeneratedMatchesHandWritten(f *testing.F) {
	for _, m := range full() {
		f.Add(m.MarshalAppend(nil))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for name := range oldTypes {
			nm := newMessage(name)
			om := reflect.New(oldTypes[name]).Interface().(oldMessage)
			nerr, oerr := nm.Unmarshal(b), om.Unmarshal(b)
			if fmt.Sprint(nerr) != fmt.Sprint(oerr) {
				t.Fatalf("%s: error %v, hand-written %v", name, nerr, oerr)
			}
			if nerr != nil {
				continue
			}
			if g, w := strings.Replace(fmt.Sprintf("%#v", asOld(nm)), "oldcodec.", "", -1), strings.Replace(fmt.Sprintf("%#v", om), "oldcodec.", "", -1); g != w {
				t.Fatalf("%s: decoded\n%s\nhand-written\n%s", name, g, w)
			}
			if g, w := nm.MarshalAppend(nil), om.MarshalAppend(nil); !bytes.Equal(g, w) {
				t.Fatalf("%s: encodes %x, hand-written %x", name, g, w)
			}
		}
		var n PolicyRequest
		var o oldcodec.PolicyRequest
		nerr, oerr := n.UnmarshalBorrowing(b), o.UnmarshalBorrowing(b)
		if fmt.Sprint(nerr) != fmt.Sprint(oerr) {
			t.Fatalf("UnmarshalBorrowing: error %v, hand-written %v", nerr, oerr)
		}
	})
}
