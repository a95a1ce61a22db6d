package structs

import "time"

// SchedulerCursor records how far a scheduler source's changes have been
// applied to volhost's state: Index is the scheduler's own index (Nomad's
// raft index) of the last change mirrored. It lives in the replicated
// state, so a new volhost leader resumes where the old one stopped instead
// of where its own memory says.
type SchedulerCursor struct {
	Source string `json:"source"`
	Index  uint64 `json:"index"`
	// Resets counts the times the scheduler's index went backwards (its
	// state was lost, e.g. a Nomad dev agent restarted): the source then
	// lists everything again from the lower index.
	Resets      int       `json:"resets,omitempty"`
	UpdateTime  time.Time `json:"update_time"`
	CreateIndex uint64    `json:"create_index"`
	ModifyIndex uint64    `json:"modify_index"`
}

// Copy returns a copy.
func (c *SchedulerCursor) Copy() *SchedulerCursor {
	if c == nil {
		return nil
	}
	n := *c
	return &n
}

// SchedulerSyncRequest is one batch of a scheduler source's changes: the
// allocations it mirrors (validated like an AllocUpsertRequest, and each
// owned by Source), the events it records (what it could not mirror or
// claim), and the scheduler index they bring the source's cursor to. One
// log entry, so the cursor never runs ahead of what was applied.
//
// The store refuses a cursor that goes backwards unless Reset (the
// scheduler lost its state), and the FSM refuses an entry of another
// leadership term than Term: a deposed leader's bridge writes nothing.
type SchedulerSyncRequest struct {
	Source string    `json:"source"`
	Index  uint64    `json:"index"`
	Reset  bool      `json:"reset,omitempty"`
	Allocs []*Alloc  `json:"allocs,omitempty"`
	Events []*Event  `json:"events,omitempty"`
	Time   time.Time `json:"time"`
	Term   uint64    `json:"term,omitempty"`
}

// FencedTerm implements the FSM's term fence.
func (r *SchedulerSyncRequest) FencedTerm() uint64 { return r.Term }
