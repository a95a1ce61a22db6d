package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/gohcl"
	"github.com/hashicorp/hcl/v2/hclparse"

	"github.com/volhost/volhost/host/api"
	"github.com/volhost/volhost/host/structs"
)

// Spec files are HCL, or JSON in HCL's JSON syntax (the same blocks as
// objects: {"volume": {"vol1": {...}}}), chosen by extension (.hcl, .json)
// or, for any other name, by content (a leading "{" means JSON). A file may
// hold several blocks of its kind. Unknown arguments or blocks are errors
// naming file:line, so a typo is never silently dropped.

type volumeFile struct {
	Volumes []*volumeBlock `hcl:"volume,block"`
}

type volumeBlock struct {
	ID             string            `hcl:"id,label"`
	Namespace      string            `hcl:"namespace,optional"`
	Name           string            `hcl:"name,optional"`
	ExternalID     string            `hcl:"external_id"`
	PluginID       string            `hcl:"plugin_id"`
	AccessMode     string            `hcl:"access_mode"`
	AttachmentMode string            `hcl:"attachment_mode"`
	MountFlags     []string          `hcl:"mount_flags,optional"`
	FSType         string            `hcl:"fs_type,optional"`
	Secrets        map[string]string `hcl:"secrets,optional"`
	Parameters     map[string]string `hcl:"parameters,optional"`
	Context        map[string]string `hcl:"context,optional"`
	DeclRange      hcl.Range         `hcl:",def_range"`
}

type nodeFile struct {
	Nodes []*nodeBlock `hcl:"node,block"`
}

type nodeBlock struct {
	ID        string             `hcl:"id,label"`
	Status    string             `hcl:"status,optional"`
	RootDir   string             `hcl:"root_dir,optional"`
	Meta      map[string]string  `hcl:"meta,optional"`
	Plugins   []*nodePluginBlock `hcl:"plugin,block"`
	DeclRange hcl.Range          `hcl:",def_range"`
}

// nodePluginBlock names a CSI node endpoint; the agent probes it for the
// external node ID and capabilities, so those are not written here.
type nodePluginBlock struct {
	PluginID string `hcl:"plugin_id,label"`
	Endpoint string `hcl:"endpoint"`
}

type pluginFile struct {
	Plugins []*pluginBlock `hcl:"plugin,block"`
}

// pluginBlock names a CSI plugin; capabilities are probed, not declared.
type pluginBlock struct {
	ID                 string `hcl:"id,label"`
	ControllerEndpoint string `hcl:"controller_endpoint,optional"`
}

type allocFile struct {
	Allocs []*allocBlock `hcl:"alloc,block"`
}

type allocBlock struct {
	ID           string    `hcl:"id,label"`
	Namespace    string    `hcl:"namespace,optional"`
	NodeID       string    `hcl:"node_id"`
	JobID        string    `hcl:"job_id,optional"`
	ClientStatus string    `hcl:"client_status,optional"`
	DeclRange    hcl.Range `hcl:",def_range"`
}

// decodeSpec reads path and decodes it into out (a *xxxFile).
func decodeSpec(path string, out any) error {
	src, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read spec file: %w", err)
	}
	p := hclparse.NewParser()
	var f *hcl.File
	var diags hcl.Diagnostics
	switch ext := strings.ToLower(filepath.Ext(path)); {
	case ext == ".json", ext != ".hcl" && bytes.HasPrefix(bytes.TrimSpace(src), []byte("{")):
		f, diags = p.ParseJSON(src, path)
	default:
		f, diags = p.ParseHCL(src, path)
	}
	if diags.HasErrors() {
		return diagError(diags)
	}
	if diags := gohcl.DecodeBody(f.Body, nil, out); diags.HasErrors() {
		return diagError(diags)
	}
	return nil
}

// diagError folds HCL diagnostics into one line: the most telling error
// as "file:line: summary: detail", plus how many more there are. An
// unknown argument or block comes first: a misspelt required argument
// (acess_mode) is also reported missing, and HCL lists "Missing required
// argument" first, which hid its "Did you mean "access_mode"?".
func diagError(diags hcl.Diagnostics) error {
	errs := diags.Errs()
	var first *hcl.Diagnostic
	if !errors.As(errs[0], &first) {
		return errs[0]
	}
	for _, e := range errs {
		var d *hcl.Diagnostic
		if errors.As(e, &d) && strings.HasPrefix(d.Summary, "Unsupported ") {
			first = d
			break
		}
	}
	msg := first.Summary
	if first.Detail != "" {
		msg += ": " + strings.TrimSuffix(first.Detail, ".")
	}
	if first.Subject != nil {
		msg = fmt.Sprintf("%s:%d: %s", first.Subject.Filename, first.Subject.Start.Line, msg)
	}
	if n := len(errs) - 1; n > 0 {
		msg += fmt.Sprintf(" (and %d more error(s))", n)
	}
	return errors.New(msg)
}

// at prefixes an error with a block's file:line.
func at(r hcl.Range, format string, args ...any) error {
	return fmt.Errorf("%s:%d: %s", r.Filename, r.Start.Line, fmt.Sprintf(format, args...))
}

func loadVolumes(path string) ([]*structs.Volume, error) {
	var f volumeFile
	if err := decodeSpec(path, &f); err != nil {
		return nil, err
	}
	if len(f.Volumes) == 0 {
		return nil, fmt.Errorf("%s: no volume blocks", path)
	}
	out := make([]*structs.Volume, 0, len(f.Volumes))
	for _, b := range f.Volumes {
		// The agent validates too; checking the enums here lets the error
		// point at the file and line.
		if !structs.AccessMode(b.AccessMode).Valid() {
			return nil, at(b.DeclRange, "volume %q: access_mode: must be one of %s, got %q", b.ID, structs.Choices(structs.AccessModes...), b.AccessMode)
		}
		if !structs.AttachmentMode(b.AttachmentMode).Valid() {
			return nil, at(b.DeclRange, "volume %q: attachment_mode: must be one of %s, got %q", b.ID, structs.Choices(structs.AttachmentModes...), b.AttachmentMode)
		}
		if b.Namespace == "" {
			b.Namespace = api.DefaultNamespace
		}
		out = append(out, &structs.Volume{
			Namespace: b.Namespace, ID: b.ID, Name: b.Name, ExternalID: b.ExternalID, PluginID: b.PluginID,
			AccessMode: structs.AccessMode(b.AccessMode), AttachmentMode: structs.AttachmentMode(b.AttachmentMode),
			MountFlags: b.MountFlags, FSType: b.FSType, Secrets: b.Secrets, Parameters: b.Parameters, Context: b.Context,
		})
	}
	return out, nil
}

func loadNodes(path string) ([]*structs.Node, error) {
	var f nodeFile
	if err := decodeSpec(path, &f); err != nil {
		return nil, err
	}
	if len(f.Nodes) == 0 {
		return nil, fmt.Errorf("%s: no node blocks", path)
	}
	out := make([]*structs.Node, 0, len(f.Nodes))
	for _, b := range f.Nodes {
		if b.Status == "" {
			b.Status = string(structs.NodeReady)
		}
		if !structs.NodeStatus(b.Status).Valid() {
			return nil, at(b.DeclRange, "node %q: status: must be one of %s, %s, got %q", b.ID, structs.NodeReady, structs.NodeDown, b.Status)
		}
		n := &structs.Node{ID: b.ID, Status: structs.NodeStatus(b.Status), RootDir: b.RootDir, Meta: b.Meta}
		for _, p := range b.Plugins {
			if n.Plugins == nil {
				n.Plugins = map[string]*structs.NodePlugin{}
			}
			if _, dup := n.Plugins[p.PluginID]; dup {
				return nil, at(b.DeclRange, "node %q: plugin %q appears twice", b.ID, p.PluginID)
			}
			n.Plugins[p.PluginID] = &structs.NodePlugin{PluginID: p.PluginID, Endpoint: p.Endpoint}
		}
		out = append(out, n)
	}
	return out, nil
}

func loadPlugins(path string) ([]*structs.Plugin, error) {
	var f pluginFile
	if err := decodeSpec(path, &f); err != nil {
		return nil, err
	}
	if len(f.Plugins) == 0 {
		return nil, fmt.Errorf("%s: no plugin blocks", path)
	}
	out := make([]*structs.Plugin, 0, len(f.Plugins))
	for _, b := range f.Plugins {
		out = append(out, &structs.Plugin{ID: b.ID, ControllerEndpoint: b.ControllerEndpoint})
	}
	return out, nil
}

func loadAllocs(path string) ([]*structs.Alloc, error) {
	var f allocFile
	if err := decodeSpec(path, &f); err != nil {
		return nil, err
	}
	if len(f.Allocs) == 0 {
		return nil, fmt.Errorf("%s: no alloc blocks", path)
	}
	out := make([]*structs.Alloc, 0, len(f.Allocs))
	for _, b := range f.Allocs {
		if b.Namespace == "" {
			b.Namespace = api.DefaultNamespace
		}
		if b.ClientStatus == "" {
			b.ClientStatus = string(structs.AllocRunning)
		}
		if !structs.AllocClientStatus(b.ClientStatus).Valid() {
			return nil, at(b.DeclRange, "alloc %q: client_status: must be one of %s, got %q", b.ID, structs.Choices(structs.AllocClientStatuses...), b.ClientStatus)
		}
		out = append(out, &structs.Alloc{ID: b.ID, Namespace: b.Namespace, NodeID: b.NodeID, JobID: b.JobID,
			ClientStatus: structs.AllocClientStatus(b.ClientStatus)})
	}
	return out, nil
}
