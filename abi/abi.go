// Package abi is the contract between the volhost host and its WebAssembly
// modules: the ABI version, export and import names, and the wire messages
// with their codec. ABI.md beside this file is normative; this package is its
// Go rendering, shared by the host (plugins/) and the Go guest SDK (abi/guest).
//
// It must stay small and free of heavy dependencies: every Go guest compiles it.
package abi

//go:generate go run ./internal/gen -proto volhost.proto -go codec_gen.go -as guest-as/assembly/messages.ts

// Version is the ABI major version this host and SDK speak. A module whose
// version marker export returns anything else is refused at load.
const Version = 1

// MinorVersion is the ABI minor version this host and SDK know (ABI.md
// section 10). A minor version only adds optional exports, fields and enum
// values, so a host of 1.N serves every 1.M module: a module says which
// minor features it uses by exporting their functions, each checked with
// its exact signature at load. 1.1 adds ExportConfirmFence.
const MinorVersion = 1

// Kind is what a module judges.
type Kind string

const (
	KindReleasePolicy Kind = "release-policy"
	KindCSIAdapter    Kind = "csi-adapter"
)

// Export names a module provides.
const (
	// ExportVersion: () -> i32. Returns the ABI version the module speaks.
	ExportVersion = "volhost_abi_version"
	// ExportBuffer: (size i32) -> i32. The guest makes its buffer at least
	// size bytes long and returns its address; the host writes a request there.
	ExportBuffer = "volhost_buffer"
	// ExportConfigure: (len i32) -> i64. Called once per instance with a ConfigureRequest.
	ExportConfigure = "volhost_configure"
	// ExportDecideRelease: (len i32) -> i64. release-policy: PolicyRequest in, PolicyResponse out.
	ExportDecideRelease = "volhost_decide_release"
	// ExportAdaptRequest: (len i32) -> i64. csi-adapter: AdapterRequest in, AdapterResponse out.
	ExportAdaptRequest = "volhost_adapt_request"
	// ExportClassifyError: (len i32) -> i64. csi-adapter: ClassifyRequest in, ClassifyResponse out.
	ExportClassifyError = "volhost_classify_error"
	// ExportInitialize is the WASI reactor start function of a c-shared Go guest.
	ExportInitialize = "_initialize"
	// ExportConfirmFence: (len i32) -> i64. ABI 1.1, csi-adapter, optional:
	// FenceRequest in, FenceResponse out. Only a module exporting it is asked.
	ExportConfirmFence = "volhost_confirm_fence"
)

// Host module and its functions a guest may import.
const (
	HostModule = "volhost"
	// HostLog: (level i32, ptr i32, len i32). Writes a log line under the module's logger.
	HostLog = "log"
	// HostLogLevel: () -> i32. The lowest level the host will record.
	HostLogLevel = "log_level"
)

// The CSI steps an AdapterRequest names, and that a csi-adapter may list in
// ConfigureResponse.AdaptSteps.
const (
	StepNodeUnpublish       = "node-unpublish"
	StepNodeUnstage         = "node-unstage"
	StepControllerUnpublish = "controller-unpublish"
	StepControllerPublish   = "controller-publish"
)

// AdapterSteps lists every step an AdapterRequest may carry.
var AdapterSteps = []string{StepNodeUnpublish, StepNodeUnstage, StepControllerUnpublish, StepControllerPublish}

// Log levels for HostLog, as go-hclog numbers them.
const (
	LogTrace int32 = 1
	LogDebug int32 = 2
	LogInfo  int32 = 3
	LogWarn  int32 = 4
	LogError int32 = 5
)

// PackResult packs a response location into the i64 an export returns:
// the address in the high 32 bits, the length in the low 32.
func PackResult(ptr, length uint32) uint64 { return uint64(ptr)<<32 | uint64(length) }

// UnpackResult is the inverse of PackResult.
func UnpackResult(v uint64) (ptr, length uint32) { return uint32(v >> 32), uint32(v) }
