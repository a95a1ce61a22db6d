package structs

import (
	"errors"
	"strings"
	"testing"
)

func TestValidateEndpoint(t *testing.T) {
	tests := []struct {
		endpoint string
		why      string // "" when valid
	}{
		{"unix:///var/run/csi.sock", ""},
		{"unix:///var/run/../run/csi.sock", ""},
		{"tcp://127.0.0.1:9000", ""},
		{"tcp://csi.example:9000/", ""},
		{"tcp://[::1]:9000", ""},
		{"unix:relative.sock", "absolute"},
		{"unix://relative.sock", "absolute"},
		{"unix://", "absolute"},
		{"unix:///", "absolute"},
		{"tcp://127.0.0.1", "host:port"},
		{"tcp://:9000", "host:port"},
		{"tcp://127.0.0.1:9000?x=1", "host:port"},
		{"https://127.0.0.1:9000", "scheme https"},
		{"127.0.0.1:9000", "no scheme"},
		{"foo://bar", "scheme foo is neither unix nor tcp"},
		{"unix://relative.sock", "three slashes, unix:///relative.sock"},
		{"/var/run/csi.sock", "no scheme"},
		{"", "no scheme"},
		{"unix:///var/run/csi .sock", "whitespace"},
	}
	for _, tt := range tests {
		t.Run(tt.endpoint, func(t *testing.T) {
			err := ValidateEndpoint("plugin.controller_endpoint", tt.endpoint)
			if tt.why == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var ve *ValidationError
			if !errors.As(err, &ve) || ve.Field != "plugin.controller_endpoint" {
				t.Fatalf("err = %v, want a ValidationError of the field", err)
			}
			// One message shape for every endpoint mistake, with the fix.
			if !strings.Contains(err.Error(), tt.why) || !strings.Contains(err.Error(), EndpointForms) {
				t.Fatalf("err = %q, want it to say %q and %q", err, tt.why, EndpointForms)
			}
		})
	}
}
