package api

import (
	"net/http/httptest"
	"testing"
)

// The writes that compile modules get ModuleLoadTime; nothing else does.
func TestLoadsModules(t *testing.T) {
	for _, tc := range []struct {
		method, path string
		want         bool
	}{
		{"PUT", "/v1/modules/reload", true},
		{"POST", "/v1/modules/reload", true},
		{"PUT", "/v1/module/policy/shadow", true},
		{"POST", "/v1/module/policy/promote", true},
		{"PUT", "/v1/module/policy/rollback", true},
		{"GET", "/v1/modules/reload", false},
		{"GET", "/v1/module/policy", false},
		{"DELETE", "/v1/module/policy/shadow", false},
		{"PUT", "/v1/volume/default/v/shadow", false},
		{"PUT", "/v1/modules", false},
	} {
		r := httptest.NewRequest(tc.method, tc.path, nil)
		if got := loadsModules(r); got != tc.want {
			t.Errorf("%s %s: %v, want %v", tc.method, tc.path, got, tc.want)
		}
	}
}
