package kit

import (
	"github.com/volhost/volhost/abi"
)

// Recording is what `module record` writes: a case without its
// expectation. `module run -view` replays it as it is; `module test` wants
// an "expect" or "expect_fault" added first, so a recorded case never
// passes without its author saying what the answer must be.
type Recording struct {
	Name string `json:"name"`
	View View   `json:"view"`
}

// Redacted marks a value removed from a recorded view.
const Redacted = "<redacted>"

// Record builds a recording of the views the watcher would hand a module,
// with every secret of the volume redacted: a context or node meta entry
// whose key names a secret or whose value is a secret's value. Secrets never
// reach a module (it names secret keys, the host fills the values), so this
// only catches a secret copied into a context by hand; a recording may be
// committed beside a module's source.
func Record(name string, policy *abi.PolicyRequest, adapter *abi.AdapterRequest, secrets map[string]string) *Recording {
	r := &Recording{Name: name}
	if policy != nil {
		r.View.Policy = PolicyView(policy)
		redact(r.View.Policy.Volume.Context, secrets)
		for i := range r.View.Policy.Nodes {
			redact(r.View.Policy.Nodes[i].Meta, secrets)
		}
	}
	if adapter != nil {
		r.View.Adapter = AdapterView(adapter)
		redact(r.View.Adapter.Volume.Context, secrets)
		redact(r.View.Adapter.Node.Meta, secrets)
	}
	return r
}

func redact(m, secrets map[string]string) {
	if len(secrets) == 0 {
		return
	}
	values := make(map[string]bool, len(secrets))
	for _, v := range secrets {
		if v != "" {
			values[v] = true
		}
	}
	for k, v := range m {
		if _, ok := secrets[k]; ok || values[v] {
			m[k] = Redacted
		}
	}
}
