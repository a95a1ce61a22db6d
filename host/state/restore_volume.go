package state

import (
	"math"

	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/internal/plainjson"
)

// decodePlainVolume decodes row, a volume as Persist writes it, without
// encoding/json: objects of the keys Volume's tags name, each once (a
// claim's, its error's and hold's: host/structs' ReadClaimJSON), strings
// of ASCII, integers without sign, fraction, exponent or leading zero that
// fit their field, RFC 3339 times, and no white space. That is every
// volume Persist writes whose strings are ASCII, and json.Unmarshal gives
// exactly the same Volume for such a row (TestDecodePlainVolume,
// FuzzDecodePlainVolume); anything else returns ok false and takes
// json.Unmarshal, which accepts or refuses it as before. At 1,000,000
// volumes encoding/json's decoding was a large part of a restore's CPU
// (BenchmarkScale, BenchmarkRestore).
//
// The repeated strings of the volume itself come from in, without a copy
// per row; shared reports whether that was all its strings (no claims,
// no stuck mark: the caller interns those rows' other strings).
func decodePlainVolume(row []byte, in *interner) (v *structs.Volume, shared, ok bool) {
	p := plainjson.Scanner{B: row}
	v = &structs.Volume{}
	var seen uint32
	ok = p.Fields(func(key []byte) bool {
		bit, field := plainVolumeField(v, string(key))
		if bit == 0 || seen&bit != 0 {
			return false
		}
		seen |= bit
		var ok bool
		switch bit {
		case fieldCreateIndex:
			v.CreateIndex, ok = p.Uint(math.MaxUint64)
		case fieldModifyIndex:
			v.ModifyIndex, ok = p.Uint(math.MaxUint64)
		case fieldMountFlags:
			v.MountFlags, ok = p.Strings()
		case fieldSecrets:
			v.Secrets, ok = p.StringMap()
		case fieldParameters:
			v.Parameters, ok = p.StringMap()
		case fieldContext:
			v.Context, ok = p.StringMap()
		case fieldClaims:
			v.Claims, ok = readClaims(&p)
		case fieldStuck:
			v.Stuck, ok = structs.ReadStuckJSON(&p)
		default:
			var s []byte
			if s, ok = p.Str(); ok {
				*field = in.bytes(s, bit&internedVolumeFields != 0)
			}
		}
		return ok
	})
	if !ok || !p.Done() {
		return nil, false, false
	}
	return v, v.Claims == nil && v.Stuck == nil, true
}

// readClaims reads a volume's claims: null (a nil map) or an object of
// claims by allocation ID, each key once ({} is an empty map, as
// encoding/json makes it).
func readClaims(p *plainjson.Scanner) (map[string]*structs.Claim, bool) {
	if p.Literal("null") {
		return nil, true
	}
	claims := map[string]*structs.Claim{}
	ok := p.Fields(func(id []byte) bool {
		if _, again := claims[string(id)]; again {
			return false // encoding/json keeps the last: left to it
		}
		c, ok := structs.ReadClaimJSON(p)
		claims[string(id)] = c
		return ok
	})
	return claims, ok
}

const (
	fieldNamespace uint32 = 1 << iota
	fieldID
	fieldName
	fieldExternalID
	fieldPluginID
	fieldAccessMode
	fieldAttachmentMode
	fieldFSType
	fieldCreateIndex
	fieldModifyIndex
	fieldMountFlags
	fieldSecrets
	fieldParameters
	fieldContext
	fieldClaims
	fieldStuck

	// The fields shared by many volumes, kept once in the interner.
	internedVolumeFields = fieldNamespace | fieldPluginID | fieldAccessMode | fieldAttachmentMode | fieldFSType
)

// plainVolumeField names the field of v a key sets, by the JSON name
// Volume's tags give it (exactly: any other spelling, which json.Unmarshal
// might still match, takes the general path), and for a string field
// where it goes.
func plainVolumeField(v *structs.Volume, key string) (uint32, *string) {
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
	case "mount_flags":
		return fieldMountFlags, nil
	case "secrets":
		return fieldSecrets, nil
	case "parameters":
		return fieldParameters, nil
	case "context":
		return fieldContext, nil
	case "claims":
		return fieldClaims, nil
	case "stuck":
		return fieldStuck, nil
	}
	return 0, nil
}

// bytes returns b as a string: the interner's copy when shared (one copy
// for all the rows that repeat it), else a new one.
func (in *interner) bytes(b []byte, shared bool) string {
	if !shared {
		return string(b)
	}
	if s, ok := in.strs[string(b)]; ok { // no allocation for the lookup
		return s
	}
	s := string(b)
	in.strs[s] = s
	return s
}
