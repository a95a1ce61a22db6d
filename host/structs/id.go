package structs

import (
	"fmt"
	"unicode"
	"unicode/utf8"
)

// MaxIDLength bounds every ID (volume, namespace, alloc, node, plugin,
// module, policy, accessor).
const MaxIDLength = 128

// ValidateID is the one rule every new ID obeys, wherever it arrives (a
// path, a query, a body, a node agent's hello, the leader's check before
// it writes an entry): 1 to MaxIDLength characters
// from the ASCII letters, digits and - _ . : / @, and not "." or "..".
//
// IDs are what people compare by eye, in the CLI, the UI and the logs. An
// earlier rule refused only whitespace, control and format (Cf)
// characters, and "vol1" and "vol1" followed by a Hangul filler (U+3164),
// a combining grapheme joiner (U+034F) or a variation selector were two
// volumes that printed the same; letters of other scripts add look-alikes
// no list of invisible characters removes (Cyrillic "о" against Latin
// "o"). An allowlist of ASCII admits no invisible character and no pair
// that differs only in script, as Kubernetes' names and Nomad's IDs do;
// ":" "/" "@" keep the IDs drivers already use (GCE's
// projects/P/zones/Z/instances/N, user@host). "." and ".." are resolved
// away by clients and proxies, so such an ID could never be addressed.
func ValidateID(field, id string) error {
	switch {
	case id == "":
		return Invalid(field, "must not be empty")
	case len(id) > MaxIDLength:
		return Invalid(field, "is %d bytes long, at most %d allowed", len(id), MaxIDLength)
	case id == "." || id == "..":
		return Invalid(field, "%q is reserved (it cannot be a path segment)", id)
	}
	for i := 0; i < len(id); i++ {
		if !idByte(id[i]) {
			return Invalid(field, "%s at byte %d is not allowed: an ID holds only ASCII letters, digits and - _ . : / @ (%s)", describeByte(id, i), i, IDRule)
		}
	}
	return nil
}

// ValidateStoredID is the rule for IDs already committed: log entries
// being applied (on every replica, and replayed after a restart) and
// snapshot rows being restored. It is the rule of the versions before
// ValidateID's allowlist: 1 to MaxIDLength bytes of valid UTF-8, not "."
// or "..", and no whitespace, control or format (Cf) character.
//
// A committed entry was accepted by the leader of its day; refusing it
// now would stop, or split, a replica that replays a log written by an
// earlier version ("vol+1", "vol~1", "völ1" were valid then). So
// ValidateID, strict, is applied where an ID enters the cluster (the
// API, the node RPC's hello, the CLI, and the leader before it writes an
// entry that names a new ID: state.Snapshot.Validate), and this rule
// where one is already in. The characters it still refuses were refused
// by every version, so no committed entry holds them.
func ValidateStoredID(field, id string) error {
	switch {
	case id == "":
		return Invalid(field, "must not be empty")
	case len(id) > MaxIDLength:
		return Invalid(field, "is %d bytes long, at most %d allowed", len(id), MaxIDLength)
	case !utf8.ValidString(id):
		return Invalid(field, "is not valid UTF-8")
	case id == "." || id == "..":
		return Invalid(field, "%q is reserved (it cannot be a path segment)", id)
	}
	for _, r := range id {
		if unicode.IsSpace(r) || unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
			return Invalid(field, "must not contain whitespace or control characters, nor invisible format characters (%U)", r)
		}
	}
	return nil
}

// IDRule names the rule in errors and help texts.
const IDRule = "README \"Identifiers\""

func idByte(b byte) bool {
	switch {
	case 'a' <= b && b <= 'z', 'A' <= b && b <= 'Z', '0' <= b && b <= '9':
		return true
	}
	switch b {
	case '-', '_', '.', ':', '/', '@':
		return true
	}
	return false
}

// describeByte names the character starting at byte i of s for an error
// (every byte before it is ASCII, so i starts a character): its code
// point, and itself when it is printable ASCII (anything else may print
// as nothing, or as a letter it is not).
func describeByte(s string, i int) string {
	r, size := utf8.DecodeRuneInString(s[i:])
	switch {
	case r == utf8.RuneError && size <= 1:
		return fmt.Sprintf("invalid UTF-8 byte 0x%02x", s[i])
	case r > ' ' && r < 0x7f:
		return fmt.Sprintf("%q (%U)", r, r)
	}
	return fmt.Sprintf("%U", r)
}
