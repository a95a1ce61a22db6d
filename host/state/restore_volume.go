package state

import (
	"math"

	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/internal/plainjson"
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
// volumes encoding/json's decoding was a large part of a restore's CPU
// (BenchmarkScale).
//
// The repeated strings come from in, without a copy per row.
func decodePlainVolume(row []byte, in interner) (v *structs.Volume, ok bool) {
	p := plainjson.Scanner{B: row}
	v = &structs.Volume{}
	var seen uint16
	ok = p.Fields(func(key []byte) bool {
		bit, field := plainVolumeField(v, string(key))
		if bit == 0 || seen&bit != 0 {
			return false
		}
		seen |= bit
		var ok bool
		switch {
		case field != nil:
			var s []byte
			if s, ok = p.Str(); ok {
				*field = in.bytes(s, bit&internedVolumeFields != 0)
			}
		case bit == fieldCreateIndex:
			v.CreateIndex, ok = p.Uint(math.MaxUint64)
		default: // fieldModifyIndex
			v.ModifyIndex, ok = p.Uint(math.MaxUint64)
		}
		return ok
	})
	if !ok || !p.Done() {
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
