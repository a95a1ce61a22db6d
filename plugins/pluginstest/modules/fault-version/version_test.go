package main

import (
	"testing"

	"github.com/volhost/volhost/abi"
)

func TestWellFormedApartFromVersion(t *testing.T) {
	if wrongVersion == abi.Version {
		t.Fatal("fault-version must not speak the current ABI version")
	}
	var cr abi.ConfigureResponse
	if err := cr.Unmarshal(configure((&abi.ConfigureRequest{ModuleName: "fault-version"}).MarshalAppend(nil))); err != nil || cr.Error != "" {
		t.Fatalf("configure: %+v %v", cr, err)
	}
	req := &abi.PolicyRequest{Claims: []abi.ClaimView{{AllocID: "a"}, {AllocID: "b"}}}
	var pr abi.PolicyResponse
	if err := pr.Unmarshal(decide(req.MarshalAppend(nil))); err != nil || len(pr.Decisions) != 2 || pr.Decisions[1].Action != abi.ActionWait {
		t.Fatalf("decide: %+v %v", pr, err)
	}
}
