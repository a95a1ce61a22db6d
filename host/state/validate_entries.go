package state

import (
	"strconv"

	"github.com/volhost/volhost/host/structs"
)

// entries checks the list of a batch write (volumes, allocations,
// events, ACL policies) in the one shape all of them share, so each
// refuses an empty list and a null entry with the same words: an empty
// list is "<field>: at least one <what> is required", entry i is named
// "<field>[i]" in errors, a null one is refused (a nil row would panic
// the FSM's apply on every replica), and check judges each other entry
// in order, the first refusal refusing the write.
func entries[T any](field, what string, items []*T, check func(f string, e *T) error) error {
	if len(items) == 0 {
		return structs.Invalid(field, "at least one %s is required", what)
	}
	for i, e := range items {
		f := field + "[" + strconv.Itoa(i) + "]"
		if e == nil {
			return structs.Invalid(f, "is null")
		}
		if err := check(f, e); err != nil {
			return err
		}
	}
	return nil
}
