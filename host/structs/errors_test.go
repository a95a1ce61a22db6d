package structs

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// TestClassErrorsReadAsOneSentence: NotFound and Conflict errors are of
// their class for callers that branch (errors.Is, the HTTP status) but
// their message is the sentence alone, without the ": not found" or
// ": conflict" suffix a new operator saw at the end of CLI errors.
func TestClassErrorsReadAsOneSentence(t *testing.T) {
	tests := []struct {
		err   error
		class error
		want  string
	}{
		{NotFound("volume", "default/vol1"), ErrNotFound, `volume "default/vol1" does not exist`},
		{Conflict("volume %q is in use by %d allocation(s)", "vol1", 2), ErrConflict, `volume "vol1" is in use by 2 allocation(s)`},
		{ErrStaleTerm, ErrConflict, "written under a leadership term that is no longer current"},
		{fmt.Errorf("claim: %w", Conflict("taken")), ErrConflict, "claim: taken"},
	}
	for _, tt := range tests {
		if !errors.Is(tt.err, tt.class) {
			t.Errorf("%q is not %v", tt.err, tt.class)
		}
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("message %q, want %q", got, tt.want)
		}
		for _, suffix := range []string{": not found", ": conflict"} {
			if strings.HasSuffix(tt.err.Error(), suffix) {
				t.Errorf("%q ends in %q", tt.err, suffix)
			}
		}
	}
	if errors.Is(NotFound("node", "n1"), ErrConflict) {
		t.Error("a NotFound error is a conflict")
	}
}
