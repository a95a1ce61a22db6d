package api

import (
	"net/http"

	"github.com/volhost/volhost/host/scheduler"
)

// SchedulerBackend reports the scheduler sources (the Nomad bridge).
type SchedulerBackend interface {
	SchedulerStatus() []scheduler.Status
}

// SchedulersResponse answers GET /v1/scheduler/status.
type SchedulersResponse struct {
	Schedulers []scheduler.Status `json:"schedulers"`
}

// EnableSchedulers adds GET /v1/scheduler/status: each source's connection
// state, committed index, counts, last error and problem lines. Like every
// read it is answered by the leader, the server that runs the sources.
func (s *Server) EnableSchedulers(b SchedulerBackend) {
	s.mux.HandleFunc("GET /v1/scheduler/status", func(w http.ResponseWriter, _ *http.Request) {
		st := []scheduler.Status{}
		if b != nil {
			st = append(st, b.SchedulerStatus()...)
		}
		WriteJSON(w, http.StatusOK, SchedulersResponse{Schedulers: st})
	})
}
