package state

import (
	"fmt"
	"sort"

	"github.com/volhost/volhost/host/structs"
)

// Field size bounds. Every object is read whole by blocking queries and
// list answers, so one oversized field multiplies by every client waiting
// on it (a 900 KB context held by 100 long polls cost 360 MB); the bounds
// keep a volume under ~60 KB while leaving room for a PEM certificate in a
// secret or context value.
const (
	MaxExternalIDLength = 1024
	MaxNameLength       = 256
	MaxMapEntries       = 32
	MaxMapKeyLength     = 256
	MaxMapValueLength   = 4096
	MaxMapBytes         = 16 << 10
	MaxMountFlags       = 32
	MaxMountFlagLength  = 256
)

// validLength bounds a string field.
func validLength(field, v string, max int) error {
	if len(v) > max {
		return structs.Invalid(field, "is %d bytes long, at most %d allowed", len(v), max)
	}
	return nil
}

// validMap bounds a string map: entries, key and value lengths, and the
// total, each error naming the field (and the key).
func validMap(field string, m map[string]string) error {
	if len(m) > MaxMapEntries {
		return structs.Invalid(field, "has %d entries, at most %d allowed", len(m), MaxMapEntries)
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	total := 0
	for _, k := range keys {
		if len(k) > MaxMapKeyLength {
			return structs.Invalid(field, "key %.40q... is %d bytes long, at most %d allowed", k, len(k), MaxMapKeyLength)
		}
		if len(m[k]) > MaxMapValueLength {
			return structs.Invalid(fmt.Sprintf("%s[%s]", field, k), "is %d bytes long, at most %d allowed", len(m[k]), MaxMapValueLength)
		}
		total += len(k) + len(m[k])
	}
	if total > MaxMapBytes {
		return structs.Invalid(field, "holds %d bytes, at most %d allowed", total, MaxMapBytes)
	}
	return nil
}

// validVolumeSizes applies the size bounds to a volume being registered.
// A field's name is built only for its refusal: the checks run on every
// volume of a registration and of a snapshot restore (a million at once).
func validVolumeSizes(f string, v *structs.Volume) error {
	for _, s := range [...]struct {
		name, v string
		max     int
	}{{"external_id", v.ExternalID, MaxExternalIDLength}, {"name", v.Name, MaxNameLength}, {"fs_type", v.FSType, MaxNameLength}} {
		if len(s.v) > s.max {
			return validLength(f+"."+s.name, s.v, s.max)
		}
	}
	if len(v.MountFlags) > MaxMountFlags {
		return structs.Invalid(f+".mount_flags", "has %d entries, at most %d allowed", len(v.MountFlags), MaxMountFlags)
	}
	for i, fl := range v.MountFlags {
		if err := validLength(fmt.Sprintf("%s.mount_flags[%d]", f, i), fl, MaxMountFlagLength); err != nil {
			return err
		}
	}
	for _, m := range [...]struct {
		name string
		m    map[string]string
	}{{"secrets", v.Secrets}, {"parameters", v.Parameters}, {"context", v.Context}} {
		if len(m.m) == 0 {
			continue // nothing an empty map could exceed
		}
		if err := validMap(f+"."+m.name, m.m); err != nil {
			return err
		}
	}
	return nil
}
