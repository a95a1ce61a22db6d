package state

import (
	"slices"
	"unique"

	"github.com/volhost/volhost/host/structs"
)

// Every server decodes every log entry, and the decoder gives each string
// of each request its own allocation: a million volumes of one namespace
// and one plugin held a million copies of "default", of the plugin's ID
// and of the access and attachment modes, and every claim its own copy of
// its node's ID and of its modes and state. Stored rows take the shared
// copy instead (Go's unique package: one per distinct value, kept while
// referenced): about 56 bytes and four heap objects less per volume
// (BenchmarkScaleHeap, host/cluster). Only fields with few distinct values
// are interned; IDs and paths are each a row's own and stay as decoded.
//
// Only an object the write made (a copy, never a stored row: memdb's
// readers share those) is interned, before it is stored. A snapshot
// restore interns the same fields with a table of its own, dropped when it
// ends (restore.go, interner.row: the field lists must stay alike). Equal
// strings stay equal, so nothing that reads a row (the snapshot encoding,
// Digest) changes.

func intern(s string) string {
	if s == "" {
		return s
	}
	return unique.Make(s).Value()
}

// internEnum answers the package constant equal to s, or s.
func internEnum[T ~string](s T, known []T) T {
	if i := slices.Index(known, s); i >= 0 {
		return known[i]
	}
	return s
}

var claimModes = []structs.ClaimMode{structs.ClaimRead, structs.ClaimWrite}

// internVolume interns v's shared fields; v is the write's own copy.
func internVolume(v *structs.Volume) {
	v.Namespace = intern(v.Namespace)
	v.PluginID = intern(v.PluginID)
	v.FSType = intern(v.FSType)
	v.AccessMode = internEnum(v.AccessMode, structs.AccessModes)
	v.AttachmentMode = internEnum(v.AttachmentMode, structs.AttachmentModes)
}

// internClaim interns c's shared fields; c is the write's own copy.
func internClaim(c *structs.Claim) {
	c.NodeID = intern(c.NodeID)
	c.ExternalNodeID = intern(c.ExternalNodeID)
	c.Mode = internEnum(c.Mode, claimModes)
	c.AccessMode = internEnum(c.AccessMode, structs.AccessModes)
	c.AttachmentMode = internEnum(c.AttachmentMode, structs.AttachmentModes)
	c.State = internEnum(c.State, structs.ClaimStates)
}

// internAlloc interns a's shared fields; a is the write's own copy.
func internAlloc(a *structs.Alloc) {
	a.Namespace = intern(a.Namespace)
	a.NodeID = intern(a.NodeID)
	a.JobID = intern(a.JobID)
	a.Source = intern(a.Source)
	a.ClientStatus = internEnum(a.ClientStatus, structs.AllocClientStatuses)
}
