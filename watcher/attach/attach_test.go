package attach

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/volhost/volhost/abi"
	"github.com/volhost/volhost/host/structs"
)

type namedAdapter struct{}

func (namedAdapter) AdaptRequest(context.Context, *abi.AdapterRequest) (*abi.AdapterResponse, error) {
	return nil, nil
}
func (namedAdapter) ClassifyError(context.Context, *abi.ClassifyRequest) (*abi.ClassifyResponse, error) {
	return nil, nil
}
func (namedAdapter) ModuleName() string    { return "m" }
func (namedAdapter) ModuleVersion() string { return "v1" }

// Secrets applies structs.Volume.SelectSecrets and makes its refusal the
// adapter's bad-output fault, naming the module.
func TestSecrets(t *testing.T) {
	v := &structs.Volume{Secrets: map[string]string{"a": "1", "b": "2"}}
	if got, fe := Secrets(namedAdapter{}, v, nil); fe != nil || !reflect.DeepEqual(got, v.Secrets) {
		t.Fatalf("nil keys: %v, %v; want every secret", got, fe)
	}
	if got, fe := Secrets(namedAdapter{}, v, []string{"b"}); fe != nil || !reflect.DeepEqual(got, map[string]string{"b": "2"}) {
		t.Fatalf("keys [b]: %v, %v", got, fe)
	}
	got, fe := Secrets(namedAdapter{}, v, []string{"a", "c"})
	if got != nil || fe == nil || fe.Kind != structs.ErrorModule || fe.Step != StepAdapter || fe.Fault != FaultBadOutput ||
		fe.Module != "m" || fe.ModuleVersion != "v1" || fe.Message != `secret key "c" is not a secret of the volume` {
		t.Fatalf("unknown key: %v, %+v; want m's bad-output fault naming the key and no secrets", got, fe)
	}
}

type confirmer struct{ err error }

func (c confirmer) ConfirmLeader(context.Context, uint64) error { return c.err }

// Call sends nothing unless leadership of the term is confirmed, and says
// so with a *NotSent; it applies its timeout to the call.
func TestCallIsFenced(t *testing.T) {
	ran := false
	err := Call(context.Background(), confirmer{structs.ErrNoLeader}, 7, 0, func(context.Context) error { ran = true; return nil })
	var ns *NotSent
	if ran || !errors.As(err, &ns) || !errors.Is(err, structs.ErrNoLeader) {
		t.Fatalf("unconfirmed: ran %t, err %v; want nothing run and a *NotSent wrapping ErrNoLeader", ran, err)
	}
	err = Call(context.Background(), confirmer{}, 7, time.Hour, func(ctx context.Context) error {
		if _, ok := ctx.Deadline(); !ok {
			return errors.New("no deadline")
		}
		ran = true
		return nil
	})
	if err != nil || !ran {
		t.Fatalf("confirmed: ran %t, err %v", ran, err)
	}
	ran = false
	if err := Call(context.Background(), nil, 0, 0, func(context.Context) error { ran = true; return nil }); err != nil || !ran {
		t.Fatalf("unfenced: ran %t, err %v", ran, err)
	}
}

type agentsMap map[string]NodeSteps

func (a agentsMap) NodeAgent(id string) (NodeSteps, bool) { s, ok := a[id]; return s, ok }

type nopSteps struct{}

func (nopSteps) NodeStageVolume(context.Context, string, *csipb.NodeStageVolumeRequest) error {
	return nil
}
func (nopSteps) NodePublishVolume(context.Context, string, *csipb.NodePublishVolumeRequest) error {
	return nil
}
func (nopSteps) NodeUnpublishVolume(context.Context, string, *csipb.NodeUnpublishVolumeRequest) error {
	return nil
}
func (nopSteps) NodeUnstageVolume(context.Context, string, *csipb.NodeUnstageVolumeRequest) error {
	return nil
}

// An agent's node is reached only through its agent, never directly.
func TestAgentOf(t *testing.T) {
	agent := nopSteps{}
	ags := agentsMap{"n1": agent}
	if a, via := AgentOf(ags, &structs.Node{ID: "n1"}); via || a != nil {
		t.Fatalf("direct node: %v, %t", a, via)
	}
	if a, via := AgentOf(ags, &structs.Node{ID: "n1", Agent: true}); !via || a != agent {
		t.Fatalf("connected agent: %v, %t", a, via)
	}
	for _, ag := range []NodeAgents{ags, nil} {
		if a, via := AgentOf(ag, &structs.Node{ID: "n2", Agent: true}); !via || a != nil {
			t.Fatalf("agent not connected (%v): %v, %t; want via its agent, none here", ag, a, via)
		}
	}
}

// A key names one claim's life and step: IDs holding '/' cannot make two
// keys collide.
func TestKey(t *testing.T) {
	c := &structs.Claim{AllocID: "a/1", CreateIndex: 12}
	k := Key(structs.VolumeRef{Namespace: "ns", ID: "v"}, c, abi.StepNodeUnstage)
	if k != "ns/v/a%2F1/12/"+abi.StepNodeUnstage {
		t.Fatalf("key %q", k)
	}
	if k2 := Key(structs.VolumeRef{Namespace: "ns", ID: "v/a"}, &structs.Claim{AllocID: "1", CreateIndex: 12}, abi.StepNodeUnstage); k2 == k {
		t.Fatalf("two claim steps share key %q", k)
	}
	if got := StepKey(WithStepKey(context.Background(), k)); got != k {
		t.Fatalf("StepKey = %q", got)
	}
}
