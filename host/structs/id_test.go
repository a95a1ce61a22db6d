package structs

import (
	"errors"
	"strings"
	"testing"
	"unicode"
)

// Every pair prints the same (or nearly) as "vol1" in a terminal or the
// UI; the rule admits only the first of each.
func TestValidateIDRefusesLookAlikes(t *testing.T) {
	for _, c := range []struct {
		name, id string
	}{
		{"Hangul filler U+3164", "vol1\u3164"},
		{"Hangul choseong filler U+115F", "vol1\u115f"},
		{"Hangul jungseong filler U+1160", "vol1\u1160"},
		{"halfwidth Hangul filler U+FFA0", "vol1\uffa0"},
		{"combining grapheme joiner U+034F", "vol1\u034f"},
		{"variation selector U+FE0F", "vol1\ufe0f"},
		{"variation selector U+FE00", "vo\ufe00l1"},
		{"variation selector supplement U+E0100", "vol1\U000e0100"},
		{"variation selector supplement U+E01EF", "vol1\U000e01ef"},
		{"zero width space U+200B (Cf)", "vol\u200b1"},
		{"soft hyphen U+00AD (Cf)", "vol\u00ad1"},
		{"word joiner U+2060", "vol1\u2060"},
		{"right-to-left override U+202E", "\u202evol1"},
		{"tag character U+E0041", "vol1\U000e0041"},
		{"Mongolian vowel separator U+180E", "vol1\u180e"},
		{"Khmer vowel inherent U+17B4", "vol1\u17b4"},
		{"Cyrillic o", "v\u043el1"},
		{"Greek omicron", "v\u03bfl1"},
		{"fullwidth digit one", "vol\uff11"},
		{"combining acute (NFD of é)", "vole\u0301"},
		{"precomposed é (its NFC twin above)", "vol\u00e9"},
		{"no-break space", "vol\u00a01"},
		{"space", "vol 1"},
		{"tab", "vol\t1"},
		{"NUL", "vol\x001"},
		{"DEL", "vol\x7f1"},
		{"invalid UTF-8", "vol\xff1"},
		{"percent (URL escapes)", "vol%201"},
		{"question mark", "vol?1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := ValidateID("volume.id", c.id)
			var ve *ValidationError
			if !errors.As(err, &ve) || ve.Field != "volume.id" || !strings.Contains(ve.Msg, "is not allowed") {
				t.Fatalf("ValidateID(%q) = %v, want refused naming the character", c.id, err)
			}
		})
	}
	for _, id := range []string{"vol1", "Vol-1_a.b", "projects/p/zones/us-central1-a/instances/n1", "user@host:4747",
		"6d2c2c1e-0000-4000-8000-00000000a77a", strings.Repeat("x", MaxIDLength)} {
		if err := ValidateID("id", id); err != nil {
			t.Errorf("ValidateID(%q) = %v", id, err)
		}
	}
	for _, id := range []string{"", ".", "..", strings.Repeat("x", MaxIDLength+1)} {
		if err := ValidateID("id", id); err == nil {
			t.Errorf("ValidateID(%q) accepted", id)
		}
	}
}

// No code point outside the allowlist passes, default-ignorable or not:
// the rule is checked against all of Unicode, not a list of known tricks.
func TestValidateIDAdmitsOnlyTheAllowlist(t *testing.T) {
	for r := rune(0); r <= unicode.MaxRune; r++ {
		if r >= 0xd800 && r <= 0xdfff {
			continue
		}
		allowed := r < 0x80 && idByte(byte(r))
		if err := ValidateID("id", "a"+string(r)); (err == nil) != allowed {
			t.Fatalf("ValidateID(a + %U) = %v, allowlisted %v", r, err, allowed)
		}
	}
}
