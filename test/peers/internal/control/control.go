// Package control owns the HTTP control endpoint of the driver programs: a
// small API on a unix socket through which the end-to-end tests arm faults,
// read the CSI calls a driver saw and ask its fake cloud what is attached.
package control

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/volhost/volhost/test/peers/internal/fault"
)

// Cloud is what a driver with a fake cloud exposes; nil for drivers without.
type Cloud interface {
	Attached(ctx context.Context, disk, node string) (bool, error)
	ArmDetachErrors(n int)
}

// FaultRequest is the body of POST /fault: a gRPC rule, detach errors, or both.
type FaultRequest struct {
	fault.Rule
	DetachErrors *int `json:"detach_errors,omitempty"`
}

// CallsResponse is the body of GET /calls.
type CallsResponse struct {
	Calls   []fault.Call `json:"calls"`
	Started []fault.Call `json:"started"`
}

// Handler serves the control API.
func Handler(inj *fault.Injector, cloud Cloud) http.Handler {
	m := http.NewServeMux()
	m.HandleFunc("POST /fault", func(w http.ResponseWriter, r *http.Request) {
		var req FaultRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, "fault: bad JSON: "+err.Error(), http.StatusBadRequest)
			return
		}
		if req.DetachErrors != nil {
			if cloud == nil {
				http.Error(w, "fault: detach_errors needs a fake cloud", http.StatusBadRequest)
				return
			}
			cloud.ArmDetachErrors(*req.DetachErrors)
		}
		if req.Method != "" || req.DetachErrors == nil {
			if err := inj.Arm(req.Rule); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
		}
		w.WriteHeader(http.StatusNoContent)
	})
	m.HandleFunc("DELETE /fault", func(w http.ResponseWriter, r *http.Request) {
		inj.Clear()
		if cloud != nil {
			cloud.ArmDetachErrors(0)
		}
		w.WriteHeader(http.StatusNoContent)
	})
	m.HandleFunc("GET /calls", func(w http.ResponseWriter, r *http.Request) {
		done, started := inj.Calls()
		writeJSON(w, CallsResponse{Calls: done, Started: started})
	})
	m.HandleFunc("DELETE /calls", func(w http.ResponseWriter, r *http.Request) {
		inj.ResetCalls()
		w.WriteHeader(http.StatusNoContent)
	})
	m.HandleFunc("GET /attached", func(w http.ResponseWriter, r *http.Request) {
		if cloud == nil {
			http.Error(w, "attached: this driver has no fake cloud", http.StatusNotFound)
			return
		}
		disk, node := r.URL.Query().Get("disk"), r.URL.Query().Get("node")
		if disk == "" || node == "" {
			http.Error(w, "attached: disk and node are required", http.StatusBadRequest)
			return
		}
		on, err := cloud.Attached(r.Context(), disk, node)
		if err != nil {
			http.Error(w, fmt.Sprintf("attached: %v", err), http.StatusNotFound)
			return
		}
		writeJSON(w, map[string]bool{"attached": on})
	})
	return m
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
