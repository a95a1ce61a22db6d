//go:build volhostcheck

package state

// Built with -tags volhostcheck (make test builds every package so), every
// write transaction compares each answer of its ownRows overlay with the
// transaction's own read and panics on a mismatch (own_rows.go). The
// package's own tests turn the check on in TestMain; the tag carries it
// into every other package's tests, so each release, claim and
// registration flow the cluster, agent, server and API tests drive checks
// the overlay too: a write of the volumes or allocs tables that bypassed
// insertRow or deleteRow would fail there, not show up as a stale read in
// production.
func init() { ownRowsCheck = true }
