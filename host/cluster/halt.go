package cluster

import (
	"fmt"

	"github.com/hashicorp/raft"

	"github.com/volhost/volhost/host/structs"
)

// UnknownEntryError is a committed log entry whose type this binary does
// not know: a newer server wrote it. Skipping it would leave this replica
// without its effect, silently different from the others, so the FSM
// stops at it instead (Nomad and Consul panic the same way).
type UnknownEntryError struct {
	Index uint64
	Type  byte
	// Feature is the enabled feature that covers the type, when the log
	// recorded it (gate.go), which names the version to run.
	Feature *EnabledFeature
}

func (e *UnknownEntryError) Error() string {
	need := "a newer volhost (the version the other servers run)"
	what := ""
	if e.Feature != nil {
		need = "volhost " + e.Feature.Since + " or later"
		what = fmt.Sprintf(" (feature %q)", e.Feature.Name)
	}
	return fmt.Sprintf("raft log entry %d has type %d%s, which this server (volhost %s) does not understand: "+
		"stopped applying the log rather than skip it, which would make this replica diverge; run %s on this data directory",
		e.Index, e.Type, what, BuildVersion, need)
}

// understands returns an *UnknownEntryError when l's type is not one this
// binary applies. Undecodable entries of a known type are the decoder's
// to report.
func (f *fsm) understands(l *raft.Log) error {
	if l.Type != raft.LogCommand || len(l.Data) == 0 {
		return nil
	}
	t := l.Data[0]
	if isMetaType(t) {
		switch t {
		case clusterInitType, memberUpsertType, memberRemoveType, featuresEnableType, keyringAddType:
			return nil
		}
	} else if _, err := newRequest(structs.MessageType(t)); err == nil {
		return nil
	}
	e := &UnknownEntryError{Index: l.Index, Type: t}
	for _, en := range f.meta.enabledList() {
		for _, x := range append(append([]uint16(nil), en.Types...), en.Meta...) {
			if x == uint16(t) {
				en := en
				e.Feature = &en
			}
		}
	}
	return e
}

// stop halts the FSM at an entry it cannot apply: every later Apply and
// Snapshot refuses (no snapshot may claim the entry), and halt is called,
// which by default panics so the process exits naming the entry.
func (f *fsm) stop(err error) error {
	f.halted = err
	f.logger.Error("FATAL: cannot apply the raft log", "error", err)
	if f.halt != nil {
		f.halt(err)
		return err
	}
	panic(err)
}
