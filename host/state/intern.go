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
// ends (restore.go, interner.row), over the same fields (shareVolume). Equal
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
func internVolume(v *structs.Volume) { shareVolume(v, intern) }

// internClaim interns c's shared fields; c is the write's own copy.
func internClaim(c *structs.Claim) { shareClaim(c, intern) }

// internAlloc interns a's shared fields; a is the write's own copy.
func internAlloc(a *structs.Alloc) { shareAlloc(a, intern) }

// shareVolume, shareClaim and shareAlloc name the fields a stored row
// shares, once for both ends: a write shares them through intern, a
// restore through its own table (interner.row).
func shareVolume(v *structs.Volume, share func(string) string) {
	v.Namespace = share(v.Namespace)
	v.PluginID = share(v.PluginID)
	v.FSType = share(v.FSType)
	v.AccessMode = internEnum(v.AccessMode, structs.AccessModes)
	v.AttachmentMode = internEnum(v.AttachmentMode, structs.AttachmentModes)
}

func shareClaim(c *structs.Claim, share func(string) string) {
	c.NodeID = share(c.NodeID)
	c.ExternalNodeID = share(c.ExternalNodeID)
	c.Mode = internEnum(c.Mode, claimModes)
	c.AccessMode = internEnum(c.AccessMode, structs.AccessModes)
	c.AttachmentMode = internEnum(c.AttachmentMode, structs.AttachmentModes)
	c.State = internEnum(c.State, structs.ClaimStates)
}

func shareAlloc(a *structs.Alloc, share func(string) string) {
	a.Namespace = share(a.Namespace)
	a.NodeID = share(a.NodeID)
	a.JobID = share(a.JobID)
	a.Source = share(a.Source)
	a.ClientStatus = internEnum(a.ClientStatus, structs.AllocClientStatuses)
}
