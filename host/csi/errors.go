package csi

import (
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Error is a failed CSI call. It keeps the driver's (or gRPC's) status, so
// status.Code(err) answers the CSI code even through further %w wrapping:
// callers classify NotFound, Aborted, Unavailable... by code, never by the
// message (the reference system matches error strings across RPC).
type Error struct {
	Method   string // CSI method, e.g. "ControllerUnpublishVolume"
	Endpoint string
	err      error // a gRPC status error
}

func (e *Error) Error() string {
	st := status.Convert(e.err)
	return fmt.Sprintf("csi %s at %s: %s: %s", e.Method, e.Endpoint, st.Code(), st.Message())
}

// Unwrap returns the underlying gRPC status error.
func (e *Error) Unwrap() error { return e.err }

// GRPCStatus makes status.Code and status.FromError see the call's status.
func (e *Error) GRPCStatus() *status.Status { return status.Convert(e.err) }

// Code is the call's gRPC code.
func (e *Error) Code() codes.Code { return status.Code(e.err) }

var (
	// ErrNotReady: the plugin's Probe answered ready=false (CSI spec: the
	// CO should retry the probe later rather than use the plugin).
	ErrNotReady = errors.New("csi plugin not ready")
	// ErrNoControllerService: a controller endpoint whose plugin does not
	// advertise CONTROLLER_SERVICE.
	ErrNoControllerService = errors.New("csi plugin does not advertise CONTROLLER_SERVICE")
	// ErrNoNodeID: NodeGetInfo returned an empty node_id. The spec requires
	// one and release needs it for ControllerUnpublish, so registration
	// refuses it instead of failing every release later
	// (hashicorp/nomad#25349).
	ErrNoNodeID = errors.New("csi NodeGetInfo returned an empty node_id")
	// ErrClosed: the Client was closed.
	ErrClosed = errors.New("csi client closed")
)
