package api

import (
	"context"
	"net/http"

	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/plugins"
	"github.com/volhost/volhost/plugins/kit"
)

// ModuleBackend is the Wasm module runtime of this server. Modules are
// loaded per server from its own directory, so these routes are answered
// by the server asked, never forwarded to the leader.
type ModuleBackend interface {
	ModuleStatuses() ([]plugins.Status, error)
	ModuleInfo(name string) (*ModuleInfo, error)
	ReloadModules(ctx context.Context) ([]plugins.Status, error)
	ModuleViewer
}

// ModuleInfo is a module's runtime status and what it serves now.
type ModuleInfo struct {
	plugins.Status
	// ServedVolumes are the registered volumes this module judges now.
	ServedVolumes []structs.VolumeRef `json:"served_volumes"`
	// ServedPlugins are the CSI plugins of those volumes.
	ServedPlugins []string `json:"served_plugins"`
}

// ModulesResponse lists module statuses.
type ModulesResponse struct {
	Modules []plugins.Status `json:"modules"`
}

// EnableModules adds the module routes (issue 4): GET /v1/modules,
// GET /v1/module/{name}, PUT|POST /v1/modules/reload.
func (s *Server) EnableModules(b ModuleBackend) {
	s.mux.HandleFunc("GET /v1/modules", func(w http.ResponseWriter, _ *http.Request) {
		st, err := b.ModuleStatuses()
		if err != nil {
			WriteError(w, err)
			return
		}
		WriteJSON(w, http.StatusOK, ModulesResponse{Modules: nonNil(st)})
	})
	s.mux.HandleFunc("GET /v1/module/{id}", func(w http.ResponseWriter, r *http.Request) {
		name, err := pathID(r, "module")
		if err != nil {
			WriteError(w, err)
			return
		}
		info, err := b.ModuleInfo(name)
		if err != nil {
			WriteError(w, err)
			return
		}
		WriteJSON(w, http.StatusOK, info)
	})
	reload := func(w http.ResponseWriter, r *http.Request) {
		st, err := b.ReloadModules(r.Context())
		if err != nil {
			WriteError(w, err)
			return
		}
		WriteJSON(w, http.StatusOK, ModulesResponse{Modules: nonNil(st)})
	}
	s.mux.HandleFunc("PUT /v1/modules/reload", reload)
	s.mux.HandleFunc("POST /v1/modules/reload", reload)
	s.enableModuleView(b)
}

func nonNil(st []plugins.Status) []plugins.Status {
	if st == nil {
		return []plugins.Status{}
	}
	return st
}

// ModuleViewer answers `volhost module record` (issue 15): the views the
// watcher would hand a volume's modules now, secrets redacted.
type ModuleViewer interface {
	ModuleView(ns, id, step, allocID string) (*kit.Recording, error)
}

// enableModuleView adds GET /v1/volume/{id}/module-view?namespace=&step=&alloc=.
// It reads volume data, so it is authorised like GET /v1/volume/{id}
// (namespace read), not by a modules capability.
func (s *Server) enableModuleView(b ModuleBackend) {
	s.mux.HandleFunc("GET /v1/volume/{id}/module-view", func(w http.ResponseWriter, r *http.Request) {
		id, err := pathID(r, "volume_id")
		if err != nil {
			WriteError(w, err)
			return
		}
		ns, err := namespace(r)
		if err != nil {
			WriteError(w, err)
			return
		}
		q := r.URL.Query()
		rec, err := b.ModuleView(ns, id, q.Get("step"), q.Get("alloc"))
		if err != nil {
			WriteError(w, err)
			return
		}
		WriteJSON(w, http.StatusOK, rec)
	})
}
