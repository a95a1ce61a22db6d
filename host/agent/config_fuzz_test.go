package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzParseConfig: an agent configuration file of any bytes is a
// configuration or one error naming the file, never a panic; merged over
// the defaults, an accepted one validates or is refused with errors, and
// Merge and Validate never panic on what the parser accepted (a nil
// block, an empty list, a huge number).
func FuzzParseConfig(f *testing.F) {
	seeds, _ := filepath.Glob("testdata/*.hcl")
	for _, p := range seeds {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		c, err := ParseConfig("fuzz.hcl", src)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "config fuzz.hcl") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		cfg := DefaultConfig()
		cfg.Merge(c)
		if _, err := cfg.Validate(); err != nil && err.Error() == "" {
			t.Fatal("an empty error")
		}
		cfg.Merge(c) // twice: a later file of the same settings
		_, _ = cfg.Validate()
	})
}
