package plugins

// ABI 1.1 and 1.2 (ABI.md section 10): optional exports. A module uses a
// minor version's feature by exporting its function; the host finds it at
// load, checks its exact signature (a wrong one refuses the module, naming
// it), and asks only a generation that has it. 1.1 adds
// volhost_confirm_fence, for csi-adapter modules; 1.2 adds
// volhost_buffer_capacity, for any module (generation.exchange).

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/volhost/volhost/abi"
)

// optionalExport is an optional export's signature and the minor version
// that added it.
type optionalExport struct {
	params, results []api.ValueType
	minor           int
}

// optionalExports lists the optional exports of kind.
func optionalExports(kind abi.Kind) map[string]optionalExport {
	m := map[string]optionalExport{
		abi.ExportBufferCapacity: {nil, []api.ValueType{api.ValueTypeI32}, 2},
	}
	if kind == abi.KindCSIAdapter {
		m[abi.ExportConfirmFence] = optionalExport{[]api.ValueType{api.ValueTypeI32}, []api.ValueType{api.ValueTypeI64}, 1}
	}
	return m
}

// detectOptionalExports returns the optional exports of kind that c has,
// sorted, refusing one whose signature differs: a module exporting
// volhost_confirm_fence with another signature meant to speak ABI 1.1 and
// got it wrong, and serving it as a 1.0 module would hide that.
func detectOptionalExports(c wazero.CompiledModule, kind abi.Kind) ([]string, error) {
	exp := c.ExportedFunctions()
	var found []string
	for name, want := range optionalExports(kind) {
		f, ok := exp[name]
		if !ok {
			continue
		}
		if !sameTypes(f.ParamTypes(), want.params) || !sameTypes(f.ResultTypes(), want.results) {
			return nil, fmt.Errorf("export %s (ABI 1.%d, optional) has signature %s, want %s",
				name, want.minor, signature(f.ParamTypes(), f.ResultTypes()), signature(want.params, want.results))
		}
		found = append(found, name)
	}
	slices.Sort(found)
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

// abiVersion is the ABI version g speaks: the highest minor version of
// its optional exports (1.2 with volhost_buffer_capacity, 1.1 with only
// volhost_confirm_fence), else 1.0.
func (g *generation) abiVersion() string {
	minor := 0
	all := optionalExports(g.man.Kind)
	for _, e := range g.optional {
		minor = max(minor, all[e].minor)
	}
	return fmt.Sprintf("%d.%d", abi.Version, minor)
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
