// Package csi owns volhost's gRPC clients to CSI plugins: one cached
// connection per endpoint, a deadline on every call, plugin probing at
// registration, and errors that keep their gRPC status so callers branch on
// status.Code, never on message text (the reference system matches error
// strings across RPC).
//
// It also maps volhost's access and attachment modes onto CSI volume
// capabilities and derives the staging and target paths of a claim under a
// node's root directory.
package csi
