package plugins

// ABI 1.1 (ABI.md section 10): optional exports. A module uses a minor
// version's feature by exporting its function; the host finds it at load,
// checks its exact signature (a wrong one refuses the module, naming it),
// and asks only a generation that has it. 1.1's one optional export is
// volhost_confirm_fence, for csi-adapter modules.

import (
	"context"
	"errors"
	"fmt"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/volhost/volhost/abi"
)

// optionalExports lists the optional exports of kind with their signatures.
func optionalExports(kind abi.Kind) map[string][2][]api.ValueType {
	if kind != abi.KindCSIAdapter {
		return nil
	}
	return map[string][2][]api.ValueType{
		abi.ExportConfirmFence: {{api.ValueTypeI32}, {api.ValueTypeI64}},
	}
}

// detectOptionalExports returns the optional exports of kind that c has,
// refusing one whose signature differs: a module exporting
// volhost_confirm_fence with another signature meant to speak ABI 1.1 and
// got it wrong, and serving it as a 1.0 module would hide that.
func detectOptionalExports(c wazero.CompiledModule, kind abi.Kind) ([]string, error) {
	exp := c.ExportedFunctions()
	var found []string
	for name, sig := range optionalExports(kind) {
		f, ok := exp[name]
		if !ok {
			continue
		}
		if !sameTypes(f.ParamTypes(), sig[0]) || !sameTypes(f.ResultTypes(), sig[1]) {
			return nil, fmt.Errorf("export %s (ABI 1.1, optional) has signature %s, want %s",
				name, signature(f.ParamTypes(), f.ResultTypes()), signature(sig[0], sig[1]))
		}
		found = append(found, name)
	}
	return found, nil
}

// ErrNotExported is returned, wrapped, for a call of an optional export
// the module's serving generation does not have. It is not a fault of the
// module: the caller asked a module that never offered the feature.
var ErrNotExported = errors.New("the module does not export it")

// exports reports whether instances of g resolve export.
func (g *generation) exports(export string) bool {
	if _, ok := requiredByKind[g.man.Kind][export]; ok {
		return true
	}
	for _, e := range g.optional {
		if e == export {
			return true
		}
	}
	return false
}

// abiVersion is the ABI version g speaks: 1.1 with an optional export of
// 1.1, else 1.0.
func (g *generation) abiVersion() string {
	if len(g.optional) > 0 {
		return fmt.Sprintf("%d.%d", abi.Version, abi.MinorVersion)
	}
	return fmt.Sprintf("%d.0", abi.Version)
}

// ConfirmsFence reports whether module's serving generation exports
// volhost_confirm_fence (ABI 1.1).
func (m *Manager) ConfirmsFence(module string) bool {
	mod := (*m.modules.Load())[module]
	if mod == nil {
		return false
	}
	g := mod.cur.Load()
	return g != nil && g.exports(abi.ExportConfirmFence)
}

// ConfirmFence asks a csi-adapter module whether a lost node is known to
// be off, through the same bounded, breaker-protected path as every
// decision. The answer is validated against req (abi.FenceAnswerError: the
// node it names, the reason's length and encoding); anything else is a
// FaultBadOutput. A module whose serving generation lacks the export gets
// an error wrapping ErrNotExported. Shadow generations are not asked: a
// fence has no comparison worth a second call.
func (m *Manager) ConfirmFence(ctx context.Context, module string, req *abi.FenceRequest) (*abi.FenceResponse, error) {
	resp := new(abi.FenceResponse)
	if _, err := m.call(ctx, module, abi.KindCSIAdapter, abi.ExportConfirmFence, req, fenceDecoder(req, resp)); err != nil {
		return nil, err
	}
	return resp, nil
}

func fenceDecoder(req *abi.FenceRequest, resp *abi.FenceResponse) func([]byte) (string, error) {
	return func(b []byte) (string, error) {
		if err := resp.Unmarshal(b); err != nil {
			return "", err
		}
		if resp.Error != "" {
			return resp.Error, nil
		}
		if msg := abi.FenceAnswerError(req, resp); msg != "" {
			return "", errors.New(msg)
		}
		return "", nil
	}
}

// selfTestFenceRequest is the self-test of volhost_confirm_fence: a node
// lost for an hour. Either answer passes; it must decode and validate.
func selfTestFenceRequest() *abi.FenceRequest {
	return &abi.FenceRequest{
		NowUnixMs: selfTestNow,
		Node:      abi.NodeView{ID: "selftest-node", Status: "down", LastSeenAgeMs: 3_600_000, ExternalID: "selftest-node"},
		Plugin:    abi.PluginView{ID: "selftest", PublishUnpublish: true},
		LostAgeMs: 3_600_000, StatusReason: "missed heartbeats",
		Volume: abi.VolumeView{Namespace: "volhost-selftest", ID: "selftest", PluginID: "selftest", ExternalID: "selftest-disk"},
		Claims: []abi.ClaimView{{AllocID: "selftest-done", NodeID: "selftest-node", Mode: "write", State: "taken"}},
	}
}
