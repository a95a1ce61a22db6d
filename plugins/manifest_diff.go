package plugins

import (
	"fmt"
	"slices"
	"strings"
)

// ManifestChange is one difference between the serving generation's
// manifest and a shadow candidate's, shown before a promote so it cannot
// change what a module serves silently.
type ManifestChange struct {
	Field string `json:"field"` // the manifest attribute: default, volumes, limits.pool_size, ...
	From  string `json:"from"`
	To    string `json:"to"`
	// Selection: the change is to which volumes the module judges
	// (default, plugin_ids, volumes); promote refuses it unless allowed.
	Selection bool `json:"selection,omitempty"`
}

func (c ManifestChange) String() string {
	return fmt.Sprintf("%s: %s -> %s", c.Field, c.From, c.To)
}

// ManifestChanges lists what to changes of from: selection, kind,
// version, limits and failure strategy. Config, the sha256 pin and the
// mode are not listed (a candidate's mode is always shadow).
func ManifestChanges(from, to *Manifest) []ManifestChange {
	var out []ManifestChange
	add := func(field, a, b string, selection bool) {
		if a != b {
			out = append(out, ManifestChange{Field: field, From: a, To: b, Selection: selection})
		}
	}
	globs := func(s []string) string {
		if len(s) == 0 {
			return "-"
		}
		s = slices.Clone(s)
		slices.Sort(s)
		return "[" + strings.Join(s, ", ") + "]"
	}
	orDash := func(s string) string {
		if s == "" {
			return "-"
		}
		return s
	}
	add("default", fmt.Sprint(from.Default), fmt.Sprint(to.Default), true)
	add("plugin_ids", globs(from.PluginIDs), globs(to.PluginIDs), true)
	add("volumes", globs(from.Volumes), globs(to.Volumes), true)
	add("kind", string(from.Kind), string(to.Kind), false)
	add("version", orDash(from.Version), orDash(to.Version), false)
	add("limits.memory_pages", fmt.Sprint(from.Limits.MemoryPages), fmt.Sprint(to.Limits.MemoryPages), false)
	add("limits.call_timeout", from.Limits.CallTimeout.String(), to.Limits.CallTimeout.String(), false)
	add("limits.pool_size", fmt.Sprint(from.Limits.PoolSize), fmt.Sprint(to.Limits.PoolSize), false)
	add("limits.max_calls", fmt.Sprint(from.Limits.MaxCalls), fmt.Sprint(to.Limits.MaxCalls), false)
	add("limits.table_elements", fmt.Sprint(from.Limits.TableElements), fmt.Sprint(to.Limits.TableElements), false)
	add("on_failure", orDash(from.OnFailure), orDash(to.OnFailure), false)
	return out
}

// selectionChanges keeps the changes to what a module selects.
func selectionChanges(cs []ManifestChange) []ManifestChange {
	var out []ManifestChange
	for _, c := range cs {
		if c.Selection {
			out = append(out, c)
		}
	}
	return out
}

func joinChanges(cs []ManifestChange) string {
	parts := make([]string, len(cs))
	for i, c := range cs {
		parts[i] = c.String()
	}
	return strings.Join(parts, "; ")
}
