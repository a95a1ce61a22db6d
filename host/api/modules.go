package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/volhost/volhost/host/acl"
	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/plugins"
	"github.com/volhost/volhost/plugins/kit"
)

// ModuleBackend is the Wasm module runtime of this server. Modules are
// loaded per server from its own directory, so these routes are answered
// by the server asked, never forwarded to the leader.
type ModuleBackend interface {
	ModuleStatuses() ([]plugins.Status, error)
	// ModuleInfo lists at most limit of the served volumes.
	ModuleInfo(name string, limit int) (*ModuleInfo, error)
	ReloadModules(ctx context.Context) ([]plugins.Status, error)
	ModuleViewer
	ModuleRollout
}

// ModuleRollout is the module rollout: promote a shadow candidate, roll
// back to the last known good, upload a shadow candidate. Like reload,
// these act on the server asked.
type ModuleRollout interface {
	// PromoteModule refuses a candidate that changes the module's
	// selection unless opts allow it (?allow_selection_change=true).
	PromoteModule(ctx context.Context, name string, opts plugins.PromoteOptions) (plugins.Status, error)
	RollbackModule(ctx context.Context, name string) (plugins.Status, error)
	ShadowModule(ctx context.Context, name string, wasm, manifest []byte) (plugins.Status, error)
	// DiscardShadow drops a module's shadow candidate.
	DiscardShadow(ctx context.Context, name string) (plugins.Status, error)
}

// ModuleInfo is a module's runtime status and what it serves now.
type ModuleInfo struct {
	plugins.Status
	// ServedVolumeCount counts the registered volumes this module judges now.
	ServedVolumeCount int `json:"served_volume_count"`
	// ServedVolumes are the first of them in ID order, at most ?per_page=
	// (default and cap: the API's max_per_page).
	ServedVolumes []structs.VolumeRef `json:"served_volumes"`
	// ServedVolumesTruncated: ServedVolumes is not all of them.
	ServedVolumesTruncated bool `json:"served_volumes_truncated,omitempty"`
	// ServedPlugins are the CSI plugins of those volumes.
	ServedPlugins []string `json:"served_plugins"`
	// ServedVolumesScoped: the caller may not read every namespace, so
	// ServedVolumes holds only those of the namespaces it may read, and
	// ServedVolumeCount counts them (within the first per_page).
	ServedVolumesScoped bool `json:"served_volumes_scoped,omitempty"`
}

// scopeServed keeps, for a token that may not read every namespace, only
// the served volumes of the namespaces it may read: modules:read shows
// what a module is, namespace:read what it serves. A module serving
// "prod" volumes must not name them, nor count them, to a token scoped
// to "dev" (Nomad and Consul filter lists by namespace the same way).
func scopeServed(info *ModuleInfo, a *acl.ACL) *ModuleInfo {
	if a == nil || a.AllowedEverywhere(acl.NamespaceRead) {
		return info
	}
	out := *info
	out.Status = scopeStatus(info.Status, a)
	out.ServedVolumes = make([]structs.VolumeRef, 0, len(info.ServedVolumes))
	for _, v := range info.ServedVolumes {
		if a.Allowed(acl.NamespaceRead, v.Namespace) {
			out.ServedVolumes = append(out.ServedVolumes, v)
		}
	}
	out.ServedVolumeCount = len(out.ServedVolumes)
	out.ServedVolumesScoped = true
	return &out
}

// scopeStatus keeps, for a token that may not read every namespace, only
// the recent faults and the last shadow disagreement about volumes of the
// namespaces it may read, and the faults about no volume: their texts
// name the volume (a guest's own error text and output included), as a
// served volume list does.
func scopeStatus(st plugins.Status, a *acl.ACL) plugins.Status {
	if a == nil || a.AllowedEverywhere(acl.NamespaceRead) {
		return st
	}
	readable := func(ns string) bool { return ns == "" || a.Allowed(acl.NamespaceRead, ns) }
	faults := make([]plugins.RecentFault, 0, len(st.RecentFaults))
	for _, f := range st.RecentFaults {
		if readable(f.Namespace) {
			faults = append(faults, f)
		}
	}
	st.RecentFaults = faults
	if st.Shadow != nil && !readable(st.Shadow.LastDisagreementNamespace) {
		sh := *st.Shadow
		sh.LastDisagreement, sh.LastDisagreementNamespace = "", ""
		st.Shadow = &sh
	}
	return st
}

// writeStatuses answers module statuses scoped to the caller (scopeStatus).
func (s *Server) writeStatuses(w http.ResponseWriter, r *http.Request, sts ...plugins.Status) {
	a, err := s.currentACL(r)
	if err != nil {
		WriteError(w, err)
		return
	}
	out := make([]plugins.Status, len(sts))
	for i, st := range sts {
		out[i] = scopeStatus(st, a)
	}
	WriteJSON(w, http.StatusOK, ModulesResponse{Modules: out})
}

// writeStatus answers one module status scoped to the caller.
func (s *Server) writeStatus(w http.ResponseWriter, r *http.Request, st plugins.Status) {
	a, err := s.currentACL(r)
	if err != nil {
		WriteError(w, err)
		return
	}
	WriteJSON(w, http.StatusOK, scopeStatus(st, a))
}

// ModulesResponse lists module statuses.
type ModulesResponse struct {
	Modules []plugins.Status `json:"modules"`
}

// EnableModules adds the module routes: GET /v1/modules,
// GET /v1/module/{name}, PUT|POST /v1/modules/reload.
func (s *Server) EnableModules(b ModuleBackend) {
	s.mux.HandleFunc("GET /v1/modules", func(w http.ResponseWriter, r *http.Request) {
		st, err := b.ModuleStatuses()
		if err != nil {
			WriteError(w, err)
			return
		}
		s.writeStatuses(w, r, st...)
	})
	s.mux.HandleFunc("GET /v1/module/{id}", func(w http.ResponseWriter, r *http.Request) {
		name, err := pathID(r, "module")
		if err != nil {
			WriteError(w, err)
			return
		}
		if r.URL.Query().Has("next_token") {
			WriteError(w, badRequest("next_token", "is not supported here: the served volumes are a count and the first per_page of them"))
			return
		}
		p, err := s.pageParams(r, moduleVolumesList)
		if err != nil {
			WriteError(w, err)
			return
		}
		info, err := b.ModuleInfo(name, p.perPage)
		if err != nil {
			WriteError(w, err)
			return
		}
		a, err := s.currentACL(r)
		if err != nil {
			WriteError(w, err)
			return
		}
		WriteJSON(w, http.StatusOK, scopeServed(info, a))
	})
	reload := func(w http.ResponseWriter, r *http.Request) {
		st, err := b.ReloadModules(r.Context())
		if err != nil {
			WriteError(w, err)
			return
		}
		s.writeStatuses(w, r, st...)
	}
	s.mux.HandleFunc("PUT /v1/modules/reload", reload)
	s.mux.HandleFunc("POST /v1/modules/reload", reload)
	s.enableModuleView(b)
	s.enableModuleRollout(b)
}

// maxShadowUpload bounds a shadow upload: the largest module the host
// accepts (the agent's own module_limits may be lower and are checked by
// the runtime), base64-encoded, and a manifest.
const maxShadowUpload = plugins.DefaultMaxModuleSize*4/3 + 2<<20

// ShadowUpload is the body of PUT /v1/module/{id}/shadow. JSON like every
// write (the CSRF guard refuses form types), the module base64-encoded.
type ShadowUpload struct {
	Wasm []byte `json:"wasm"`
	// Manifest is the candidate's NAME.hcl; nil takes the serving one's.
	Manifest *string `json:"manifest,omitempty"`
}

// enableModuleRollout adds PUT|POST /v1/module/{id}/promote, .../rollback
// and .../shadow (a ShadowUpload).
func (s *Server) enableModuleRollout(b ModuleBackend) {
	act := func(do func(ctx context.Context, name string) (plugins.Status, error)) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			name, err := pathID(r, "module")
			if err != nil {
				WriteError(w, err)
				return
			}
			st, err := do(r.Context(), name)
			if err != nil {
				WriteError(w, err)
				return
			}
			s.writeStatus(w, r, st)
		}
	}
	promote := func(w http.ResponseWriter, r *http.Request) {
		allow, err := queryBool(r, "allow_selection_change")
		if err != nil {
			WriteError(w, err)
			return
		}
		act(func(ctx context.Context, name string) (plugins.Status, error) {
			return b.PromoteModule(ctx, name, plugins.PromoteOptions{AllowSelectionChange: allow})
		})(w, r)
	}
	rollback := act(func(ctx context.Context, name string) (plugins.Status, error) { return b.RollbackModule(ctx, name) })
	shadow := func(w http.ResponseWriter, r *http.Request) {
		name, err := pathID(r, "module")
		if err != nil {
			WriteError(w, err)
			return
		}
		wasm, manifest, err := readShadowUpload(w, r)
		if err != nil {
			WriteError(w, err)
			return
		}
		st, err := b.ShadowModule(r.Context(), name, wasm, manifest)
		if err != nil {
			WriteError(w, err)
			return
		}
		s.writeStatus(w, r, st)
	}
	discard := act(func(ctx context.Context, name string) (plugins.Status, error) { return b.DiscardShadow(ctx, name) })
	s.mux.HandleFunc("DELETE /v1/module/{id}/shadow", discard)
	for _, method := range []string{"PUT", "POST"} {
		s.mux.HandleFunc(method+" /v1/module/{id}/promote", promote)
		s.mux.HandleFunc(method+" /v1/module/{id}/rollback", rollback)
		s.mux.HandleFunc(method+" /v1/module/{id}/shadow", shadow)
	}
}

// readShadowUpload decodes a ShadowUpload under its own bound (a module is
// larger than the API's usual body limit).
func readShadowUpload(w http.ResponseWriter, r *http.Request) (wasm, manifest []byte, err error) {
	if r.ContentLength > maxShadowUpload {
		return nil, nil, tooLarge(maxShadowUpload)
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxShadowUpload))
	dec.DisallowUnknownFields()
	var up ShadowUpload
	if err := dec.Decode(&up); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, nil, tooLarge(mbe.Limit)
		}
		return nil, nil, badRequest("", "shadow upload: %v", err)
	}
	if len(up.Wasm) == 0 {
		return nil, nil, badRequest("wasm", "no module: upload the candidate's .wasm (base64) as \"wasm\"")
	}
	if up.Manifest != nil {
		manifest = []byte(*up.Manifest)
	}
	return up.Wasm, manifest, nil
}

// ModuleViewer answers `volhost module record`: the views the
// watcher would hand a volume's modules now, secrets redacted.
type ModuleViewer interface {
	ModuleView(ns, id, step, allocID string) (*kit.Recording, error)
}

// enableModuleView adds GET /v1/volume/{id}/module-view?namespace=&step=&alloc=.
// It reads volume data, so it is authorised like GET /v1/volume/{id}
// (namespace read), not by a modules capability.
func (s *Server) enableModuleView(b ModuleBackend) {
	s.mux.HandleFunc("GET /v1/volume/{id}/module-view", func(w http.ResponseWriter, r *http.Request) {
		ns, id, err := volumeRef(r)
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
