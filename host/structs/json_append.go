package structs

import "github.com/volhost/volhost/internal/plainjson"

// The AppendJSON methods write what json.Marshal writes for a value, field
// for field in the struct's order, or mark w refused (plainjson.Writer):
// the hot paths that encode these types by the million skip encoding/json's
// reflection with them (a raft snapshot's volumes: host/state's Persist; a
// release's checkpoint entries: host/cluster's codec). TestAppendJSON
// fills every field and compares the bytes with json.Marshal's, so a field
// added to one of these types without its line here fails it.

// AppendJSON writes v as json.Marshal does.
func (v *Volume) AppendJSON(w *plainjson.Writer) {
	if v == nil {
		w.Raw("null")
		return
	}
	w.Open()
	w.Field("namespace", v.Namespace)
	w.Field("id", v.ID)
	w.Optional("name", v.Name)
	w.Field("external_id", v.ExternalID)
	w.Field("plugin_id", v.PluginID)
	w.Field("access_mode", string(v.AccessMode))
	w.Field("attachment_mode", string(v.AttachmentMode))
	w.Strings("mount_flags", v.MountFlags)
	w.Optional("fs_type", v.FSType)
	w.StringMap("secrets", v.Secrets)
	w.StringMap("parameters", v.Parameters)
	w.StringMap("context", v.Context)
	plainjson.Map(w, "claims", v.Claims, func(c *Claim) { c.AppendJSON(w) })
	if v.Stuck != nil {
		w.Key("stuck")
		v.Stuck.AppendJSON(w)
	}
	w.Key("create_index")
	w.Uint(v.CreateIndex)
	w.Key("modify_index")
	w.Uint(v.ModifyIndex)
	w.Close()
}

// AppendJSON writes c as json.Marshal does.
func (c *Claim) AppendJSON(w *plainjson.Writer) {
	if c == nil {
		w.Raw("null")
		return
	}
	w.Open()
	w.Field("alloc_id", c.AllocID)
	w.Field("node_id", c.NodeID)
	w.Field("mode", string(c.Mode))
	w.Field("access_mode", string(c.AccessMode))
	w.Field("attachment_mode", string(c.AttachmentMode))
	w.Field("state", string(c.State))
	w.Optional("external_node_id", c.ExternalNodeID)
	w.StringMap("publish_context", c.PublishContext)
	w.Optional("staging_path", c.StagingPath)
	w.Optional("target_path", c.TargetPath)
	w.Flag("unattached", c.Unattached)
	w.Flag("restored", c.Restored)
	w.Key("attempts")
	w.Int(int64(c.Attempts))
	// time.Time is a struct: omitempty never omits it.
	w.Key("next_attempt")
	w.Time(c.NextAttempt)
	w.Key("first_failure")
	w.Time(c.FirstFailure)
	if c.LastError != nil {
		w.Key("last_error")
		c.LastError.AppendJSON(w)
	}
	w.Flag("skip_node_step", c.SkipNodeStep)
	w.Flag("node_unpublished", c.NodeUnpublished)
	w.Optional("fence_reason", c.FenceReason)
	if c.Hold != nil {
		w.Key("hold")
		c.Hold.AppendJSON(w)
	}
	w.Key("create_time")
	w.Time(c.CreateTime)
	w.Key("modify_time")
	w.Time(c.ModifyTime)
	w.Key("create_index")
	w.Uint(c.CreateIndex)
	w.Key("modify_index")
	w.Uint(c.ModifyIndex)
	w.Close()
}

// AppendJSON writes e as json.Marshal does.
func (e *ClaimError) AppendJSON(w *plainjson.Writer) {
	if e == nil {
		w.Raw("null")
		return
	}
	w.Open()
	w.Field("kind", string(e.Kind))
	w.Optional("step", e.Step)
	w.Key("code")
	w.Uint(uint64(e.Code))
	w.Optional("code_name", e.CodeName)
	w.Field("message", e.Message)
	w.Optional("module", e.Module)
	w.Optional("module_version", e.ModuleVersion)
	w.Optional("fault", e.Fault)
	w.Flag("fatal", e.Fatal)
	w.Flag("resent", e.Resent)
	w.Key("time")
	w.Time(e.Time)
	w.Close()
}

// AppendJSON writes h as json.Marshal does.
func (h *ClaimHold) AppendJSON(w *plainjson.Writer) {
	if h == nil {
		w.Raw("null")
		return
	}
	w.Open()
	w.Optional("module", h.Module)
	w.Optional("module_version", h.ModuleVersion)
	w.Optional("reason", h.Reason)
	w.Key("since")
	w.Time(h.Since)
	w.Key("until")
	w.Time(h.Until)
	w.Close()
}

// AppendJSON writes s as json.Marshal does.
func (s *Stuck) AppendJSON(w *plainjson.Writer) {
	if s == nil {
		w.Raw("null")
		return
	}
	w.Open()
	w.Key("since")
	w.Time(s.Since)
	w.Field("reason", s.Reason)
	w.Optional("alloc_id", s.AllocID)
	w.Optional("node_id", s.NodeID)
	w.Optional("module", s.Module)
	w.Optional("fault", s.Fault)
	if s.Code != 0 {
		w.Key("code")
		w.Uint(uint64(s.Code))
	}
	w.Optional("code_name", s.CodeName)
	w.Key("attempts")
	w.Int(int64(s.Attempts))
	w.Close()
}

// AppendJSON writes a as json.Marshal does.
func (a *Alloc) AppendJSON(w *plainjson.Writer) {
	if a == nil {
		w.Raw("null")
		return
	}
	w.Open()
	w.Field("id", a.ID)
	w.Field("namespace", a.Namespace)
	w.Field("node_id", a.NodeID)
	w.Optional("job_id", a.JobID)
	w.Field("client_status", string(a.ClientStatus))
	w.Optional("source", a.Source)
	w.Key("modify_time")
	w.Time(a.ModifyTime)
	w.Key("create_index")
	w.Uint(a.CreateIndex)
	w.Key("modify_index")
	w.Uint(a.ModifyIndex)
	w.Close()
}

// AppendJSON writes e as json.Marshal does.
func (e *Event) AppendJSON(w *plainjson.Writer) {
	if e == nil {
		w.Raw("null")
		return
	}
	w.Open()
	w.Key("index")
	w.Uint(e.Index)
	w.Key("time")
	w.Time(e.Time)
	w.Field("type", e.Type)
	w.Optional("namespace", e.Namespace)
	w.Optional("volume_id", e.VolumeID)
	w.Optional("alloc_id", e.AllocID)
	w.Optional("node_id", e.NodeID)
	w.Optional("plugin_id", e.PluginID)
	w.Optional("module", e.Module)
	w.Field("message", e.Message)
	w.StringMap("fields", e.Fields)
	w.Close()
}
