package main

import (
	"fmt"
	"sort"

	"github.com/volhost/volhost/abi"
	"github.com/volhost/volhost/abi/defaultpolicy"
)

// version is reported to the host in the configure response.
const version = "1.0.0"

// configure accepts no settings: a key here is a manifest mistake, refused
// at load with a message naming it rather than silently ignored.
func configure(cfg map[string]string) (string, error) {
	if len(cfg) > 0 {
		keys := make([]string, 0, len(cfg))
		for k := range cfg {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		return version, fmt.Errorf("default-policy takes no config, got keys %q", keys)
	}
	return version, nil
}

// decide is the default release policy, written into the response the SDK
// reuses across calls: in steady state a call allocates nothing, so the
// guest's GC has no work on the call path (TestGuestSteadyStateWork).
func decide(req *abi.PolicyRequest, resp *abi.PolicyResponse) error {
	defaultpolicy.DecideInto(req, resp)
	return nil
}
