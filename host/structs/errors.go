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
	// write records (a claim path once rolled back a committed claim). 503; retrying an idempotent request is safe.
	ErrOutcomeUnknown = errors.New("the write may have been recorded: its outcome is unknown; retrying the same request is safe")
	// ErrUnavailable: this server cannot take the request yet (its modules
	// are still loading); nothing was written and the same request may be
	// sent again (503).
	ErrUnavailable = errors.New("unavailable")
	// ErrStaleTerm: a fenced write (claim, checkpoint) was started under a
	// leadership term that is no longer current. A kind of ErrConflict.
	ErrStaleTerm error = &classError{msg: "written under a leadership term that is no longer current", class: ErrConflict}
)

// classError is an error of a sentinel class whose message is only its own
// sentence: `errors.Is(err, ErrConflict)` holds, but the message does not
// end in ": conflict" or ": not found" (the status class belongs
// in the exit code, the HTTP status and -json, not in the sentence).
type classError struct {
	msg   string
	class error
}

func (e *classError) Error() string { return e.msg }
func (e *classError) Unwrap() error { return e.class }

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
	return &classError{msg: fmt.Sprintf("%s %q does not exist", what, id), class: ErrNotFound}
}

// Unavailable wraps ErrUnavailable with what the server waits for.
func Unavailable(format string, args ...any) error {
	return &classError{msg: fmt.Sprintf(format, args...), class: ErrUnavailable}
}

// Conflict wraps ErrConflict with a reason.
func Conflict(format string, args ...any) error {
	return &classError{msg: fmt.Sprintf(format, args...), class: ErrConflict}
}
