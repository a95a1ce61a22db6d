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
