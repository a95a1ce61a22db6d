package main

import (
	"github.com/volhost/volhost/abi"
	"github.com/volhost/volhost/abi/defaultpolicy"
)

// configure calls the forbidden import only when asked to, which keeps the
// import reachable (the linker drops unreachable imports).
func configure(cfg map[string]string) (string, error) {
	if cfg["call_forbidden"] == "yes" {
		forbidden()
	}
	return "1.0.0", nil
}

func decide(req *abi.PolicyRequest) (*abi.PolicyResponse, error) {
	return defaultpolicy.Decide(req), nil
}
