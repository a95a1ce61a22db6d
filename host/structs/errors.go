package structs

import (
	"errors"
	"fmt"
)

// Sentinel errors callers branch on (the HTTP API maps them to status codes).
var (
	// ErrNotFound: an ID names nothing (404).
	ErrNotFound = errors.New("not found")
	// ErrConflict: the request is valid but the current state refuses it,
	// e.g. deregistering a volume in use (409).
	ErrConflict = errors.New("conflict")
	// ErrNoLeader: no leader is known, so a write cannot be committed (503).
	ErrNoLeader = errors.New("no cluster leader")
	// ErrOutcomeUnknown: a write reached the log but its commit could not
	// be confirmed (the caller's context ended, or leadership was lost
	// while waiting); it may still commit. Callers must not undo what the
	// write records (issue 10: a claim path that rolled back a committed
	// claim). 503; retrying an idempotent request is safe.
	ErrOutcomeUnknown = errors.New("the write may have been recorded: its outcome is unknown; retrying the same request is safe")
	// ErrStaleTerm: a fenced write (claim, checkpoint) was started under a
	// leadership term that is no longer current. A kind of ErrConflict.
	ErrStaleTerm = fmt.Errorf("written under a leadership term that is no longer current: %w", ErrConflict)
)

// ValidationError names the offending field of a malformed request (400).
type ValidationError struct {
	Field string
	Msg   string
}

func (e *ValidationError) Error() string {
	if e.Field == "" {
		return e.Msg
	}
	return fmt.Sprintf("%s: %s", e.Field, e.Msg)
}

// Invalid returns a *ValidationError for field.
func Invalid(field, format string, args ...any) error {
	return &ValidationError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// NotFound wraps ErrNotFound with what was missing, e.g. NotFound("volume", "default/vol1").
func NotFound(what, id string) error {
	return fmt.Errorf("%s %q: %w", what, id, ErrNotFound)
}

// Conflict wraps ErrConflict with a reason.
func Conflict(format string, args ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), ErrConflict)
}
