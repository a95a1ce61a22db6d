package kit

import (
	"strings"
	"testing"
)

// An empty case file (a `module record > cases/x.json` that failed) is
// named with what to do, not answered "EOF".
func TestParseCaseEmpty(t *testing.T) {
	for _, b := range []string{"", "\n  \n"} {
		_, err := ParseCase("cases/x.json", []byte(b))
		if err == nil || !strings.Contains(err.Error(), "case cases/x.json is empty: record one with volhost module record -o FILE VOLUME") {
			t.Errorf("ParseCase(%q) = %v", b, err)
		}
	}
}
