package state

import (
	"github.com/volhost/volhost/host/structs"
)

// decodePlainVolume decodes row, a volume as Persist writes it, when the
// row holds nothing but plain fields: the strings namespace, id, name,
// external_id, plugin_id, access_mode, attachment_mode and fs_type, and
// the numbers create_index and modify_index, each at most once, with no
// space, escape or byte outside printable ASCII in the strings, and
// numbers without sign, fraction, exponent or leading zero that fit a
// uint64. That is most volumes of a large store (those without claims,
// secrets, parameters, context or mount flags), and json.Unmarshal gives
// exactly the same Volume for such a row (TestDecodePlainVolume,
// FuzzDecodePlainVolume); anything else returns ok false and takes
// json.Unmarshal, which accepts or refuses it as before. At 1,000,000
// volumes encoding/json's decoding was a third of a restore's CPU on a
// two-core machine (issue 17: restore <= 15 s).
//
// The repeated strings come from in, without a copy per row.
func decodePlainVolume(row []byte, in interner) (v *structs.Volume, ok bool) {
	p := plainParser{b: row}
	if !p.byte('{') {
		return nil, false
	}
	v = &structs.Volume{}
	var seen uint16
	first := true
	for !p.byte('}') {
		if !first && !p.byte(',') {
			return nil, false
		}
		first = false
		key, ok := p.str()
		if !ok || !p.byte(':') {
			return nil, false
		}
		bit, field := plainVolumeField(v, string(key))
		if bit == 0 || seen&bit != 0 {
			return nil, false
		}
		seen |= bit
		switch {
		case field != nil:
			s, ok := p.str()
			if !ok {
				return nil, false
			}
			*field = in.bytes(s, bit&internedVolumeFields != 0)
		case bit == fieldCreateIndex:
			if v.CreateIndex, ok = p.uint(); !ok {
				return nil, false
			}
		default: // fieldModifyIndex
			if v.ModifyIndex, ok = p.uint(); !ok {
				return nil, false
			}
		}
	}
	if p.i != len(p.b) {
		return nil, false
	}
	return v, true
}

const (
	fieldNamespace uint16 = 1 << iota
	fieldID
	fieldName
	fieldExternalID
	fieldPluginID
	fieldAccessMode
	fieldAttachmentMode
	fieldFSType
	fieldCreateIndex
	fieldModifyIndex

	// The fields shared by many volumes, kept once in the interner.
	internedVolumeFields = fieldNamespace | fieldPluginID | fieldAccessMode | fieldAttachmentMode | fieldFSType
)

// plainVolumeField names the field of v a key sets, by the JSON name
// Volume's tags give it (exactly: any other spelling, which json.Unmarshal
// might still match, takes the general path).
func plainVolumeField(v *structs.Volume, key string) (uint16, *string) {
	switch key {
	case "namespace":
		return fieldNamespace, &v.Namespace
	case "id":
		return fieldID, &v.ID
	case "name":
		return fieldName, &v.Name
	case "external_id":
		return fieldExternalID, &v.ExternalID
	case "plugin_id":
		return fieldPluginID, &v.PluginID
	case "access_mode":
		return fieldAccessMode, (*string)(&v.AccessMode)
	case "attachment_mode":
		return fieldAttachmentMode, (*string)(&v.AttachmentMode)
	case "fs_type":
		return fieldFSType, &v.FSType
	case "create_index":
		return fieldCreateIndex, nil
	case "modify_index":
		return fieldModifyIndex, nil
	}
	return 0, nil
}

// plainParser reads the compact JSON Persist writes, refusing (ok false)
// whatever needs more than the plain reading: the caller then falls back
// to encoding/json.
type plainParser struct {
	b []byte
	i int
}

func (p *plainParser) byte(c byte) bool {
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

// str reads a string of printable ASCII without escapes.
func (p *plainParser) str() ([]byte, bool) {
	if !p.byte('"') {
		return nil, false
	}
	start := p.i
	for ; p.i < len(p.b); p.i++ {
		switch c := p.b[p.i]; {
		case c == '"':
			s := p.b[start:p.i]
			p.i++
			return s, true
		case c < 0x20 || c > 0x7e || c == '\\':
			return nil, false
		}
	}
	return nil, false
}

// uint reads a non-negative integer in canonical form that fits a uint64.
func (p *plainParser) uint() (uint64, bool) {
	start := p.i
	var n uint64
	for ; p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9'; p.i++ {
		d := uint64(p.b[p.i] - '0')
		if n > (^uint64(0)-d)/10 {
			return 0, false
		}
		n = n*10 + d
	}
	digits := p.i - start
	if digits == 0 || (digits > 1 && p.b[start] == '0') {
		return 0, false
	}
	if p.i < len(p.b) {
		if c := p.b[p.i]; c == '.' || c == 'e' || c == 'E' {
			return 0, false
		}
	}
	return n, true
}

// bytes returns b as a string: the interner's copy when shared (one copy
// for all the rows that repeat it), else a new one.
func (in interner) bytes(b []byte, shared bool) string {
	if !shared {
		return string(b)
	}
	if s, ok := in[string(b)]; ok { // no allocation for the lookup
		return s
	}
	s := string(b)
	in[s] = s
	return s
}
