package agent

import (
	"testing"

	"github.com/volhost/volhost/plugins"
)

func TestModuleEventMessage(t *testing.T) {
	tests := []struct {
		ev   plugins.Event
		want string
	}{
		{plugins.Event{Module: "grace", Kind: plugins.EventRefused, Generation: 2, Version: "1.1.0", Reason: "bad pin"},
			"module grace refused (generation 2, version 1.1.0): bad pin"},
		// Refused before the module could say its version (not "version )").
		{plugins.Event{Module: "grace", Kind: plugins.EventRefused, Generation: 1, Reason: "not a valid module"},
			"module grace refused (generation 1): not a valid module"},
		{plugins.Event{Module: "grace", Kind: plugins.EventRefused, Reason: "no manifest"},
			"module grace refused: no manifest"},
		{plugins.Event{Module: "policy", Kind: plugins.EventKind("loaded"), Generation: 3, Version: "2.0.0"},
			"module policy loaded (generation 3, version 2.0.0)"},
	}
	for _, tt := range tests {
		if got := moduleEventMessage(tt.ev); got != tt.want {
			t.Errorf("moduleEventMessage(%+v) = %q, want %q", tt.ev, got, tt.want)
		}
	}
}
