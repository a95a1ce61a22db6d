package plugins

import (
	"errors"
	"testing"

	"github.com/volhost/volhost/abi"
)

// A shadow disagreement names the answers in words and the volume.
func TestAnswerText(t *testing.T) {
	for _, c := range []struct {
		name string
		resp any
		fe   *FaultError
		want string
	}{
		{"policy", &abi.PolicyResponse{Decisions: []abi.Decision{{AllocID: "web-1", Action: abi.ActionRelease},
			{AllocID: "web-2", Action: abi.ActionWait, RetryAfterMs: 30000, Reason: "grace period"}}},
			nil, "[web-1 release; web-2 wait 30s (grace period)]"},
		{"policy enum out of range", &abi.PolicyResponse{Decisions: []abi.Decision{{AllocID: "a", Action: 9}}}, nil, "[a unspecified(9)]"},
		{"policy error", &abi.PolicyResponse{Error: "bad config"}, nil, `error "bad config"`},
		{"classify", &abi.ClassifyResponse{Outcome: abi.OutcomeRetry, RetryAfterMs: 1500, Reason: "busy"}, nil, "retry after 1.5s (busy)"},
		{"adapter", &abi.AdapterResponse{VolumeID: "d1", NodeID: "n1"}, nil, `{"VolumeID":"d1","NodeID":"n1","SecretKeys":null,"VolumeContext":null,"Error":""}`},
		{"fault", nil, &FaultError{Kind: FaultTimeout, Err: errors.New("slow")}, "fault timeout (" + (&FaultError{Kind: FaultTimeout, Err: errors.New("slow")}).Error() + ")"},
	} {
		if got := answerText(c.resp, c.fe); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
	if ns, id := requestVolume(&abi.PolicyRequest{Volume: abi.VolumeView{Namespace: "prod", ID: "v1"}}); ns != "prod" || id != "v1" {
		t.Errorf("policy request volume %s/%s", ns, id)
	}
	if ns, id := requestVolume(&abi.ClassifyRequest{VolumeID: "x"}); ns != "" || id != "" {
		t.Errorf("classify request volume %s/%s", ns, id)
	}
}
