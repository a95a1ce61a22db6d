package control

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/volhost/volhost/test/peers/internal/fault"
)

type fakeCloud struct {
	armed    int
	attached map[string]bool
}

func (f *fakeCloud) Attached(_ context.Context, disk, node string) (bool, error) {
	on, ok := f.attached[disk+"@"+node]
	if !ok {
		return false, errors.New("no such instance")
	}
	return on, nil
}
func (f *fakeCloud) ArmDetachErrors(n int) { f.armed = n }

func TestHandler(t *testing.T) {
	tests := []struct {
		name       string
		cloud      bool
		method     string
		path, body string
		wantStatus int
		wantBody   string
		wantArmed  int
	}{
		{"arm a rule", true, "POST", "/fault", `{"method":"Probe","code":"Unavailable","count":1}`, 204, "", 0},
		{"bad rule named", true, "POST", "/fault", `{"method":"Probe","code":"Nope"}`, 400, "unknown gRPC code", 0},
		{"bad JSON", true, "POST", "/fault", `{`, 400, "bad JSON", 0},
		{"detach errors", true, "POST", "/fault", `{"detach_errors":-1}`, 204, "", -1},
		{"detach errors without a cloud", false, "POST", "/fault", `{"detach_errors":2}`, 400, "fake cloud", 0},
		{"attached", true, "GET", "/attached?disk=d1&node=n1", "", 200, `"attached":true`, 0},
		{"attached needs both", true, "GET", "/attached?disk=d1", "", 400, "disk and node", 0},
		{"attached unknown node", true, "GET", "/attached?disk=d1&node=zz", "", 404, "no such instance", 0},
		{"calls", true, "GET", "/calls", "", 200, `"calls":`, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var cloud Cloud
			fc := &fakeCloud{attached: map[string]bool{"d1@n1": true}}
			if tt.cloud {
				cloud = fc
			}
			h := Handler(fault.New(), cloud)
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(tt.method, tt.path, strings.NewReader(tt.body)))
			if rec.Code != tt.wantStatus || !strings.Contains(rec.Body.String(), tt.wantBody) {
				t.Fatalf("%s %s: %d %q, want %d containing %q", tt.method, tt.path, rec.Code, rec.Body.String(), tt.wantStatus, tt.wantBody)
			}
			if fc.armed != tt.wantArmed {
				t.Errorf("detach errors armed = %d, want %d", fc.armed, tt.wantArmed)
			}
		})
	}
}

// DELETE /fault disarms the cloud too.
func TestClearDisarmsCloud(t *testing.T) {
	fc := &fakeCloud{armed: -1}
	rec := httptest.NewRecorder()
	Handler(fault.New(), fc).ServeHTTP(rec, httptest.NewRequest(http.MethodDelete, "/fault", nil))
	if rec.Code != http.StatusNoContent || fc.armed != 0 {
		t.Fatalf("DELETE /fault: %d, armed %d", rec.Code, fc.armed)
	}
}
