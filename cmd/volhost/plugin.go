package main

import (
	"context"
	"fmt"

	"github.com/volhost/volhost/host/api/client"
	"github.com/volhost/volhost/host/structs"
)

// PluginRegisterCommand is `volhost plugin register FILE`.
type PluginRegisterCommand struct{ *Meta }

func (c *PluginRegisterCommand) Synopsis() string { return "Register CSI plugins from a spec file" }
func (c *PluginRegisterCommand) Help() string {
	return helpText("plugin register [options] FILE", `
  Register (or update) the CSI plugins described in FILE (HCL, or HCL's
  JSON syntax), one or more plugin blocks:

    plugin "gce-pd" {
      controller_endpoint = "unix:///run/csi/gce-pd-controller.sock"  # optional
    }

  The agent probes the controller (GetPluginInfo, ControllerGetCapabilities)
  and records what it reports; an endpoint that does not answer is an error.`, false)
}

func (c *PluginRegisterCommand) Run(args []string) int {
	return registerFile(c.Meta, "plugin", args, loadPlugins, func(ctx context.Context, cl *client.Client, plugins []*structs.Plugin) error {
		for _, p := range plugins {
			got, err := cl.RegisterPlugin(ctx, p)
			if err != nil {
				return fmt.Errorf("plugin %q: %w", p.ID, err)
			}
			c.Ui.Output(fmt.Sprintf("Registered plugin %q (controller publish/unpublish: %v)", got.ID, got.Capabilities.PublishUnpublish))
		}
		return nil
	})
}

// PluginStatusCommand is `volhost plugin status [ID]`.
type PluginStatusCommand struct{ *Meta }

func (c *PluginStatusCommand) Synopsis() string { return "Show CSI plugins, or one plugin" }
func (c *PluginStatusCommand) Help() string {
	return helpText("plugin status [options] [ID]", `
  Without ID, list the CSI plugins. With ID, show the plugin, its probed
  capabilities and its volumes.`, true)
}

func (c *PluginStatusCommand) Run(args []string) int {
	fs := c.flagSet("plugin status", true)
	rest, cl, ctx, stop, err := c.begin(fs, args, 0, 1, "plugin status [options] [ID]")
	if err != nil {
		return c.fail(err)
	}
	defer stop()
	if len(rest) == 0 {
		ps, _, err := cl.Plugins(ctx, nil)
		if err != nil {
			return c.fail(err)
		}
		if c.json {
			return c.printJSON(ps)
		}
		if len(ps) == 0 {
			c.Ui.Output("No plugins")
			return 0
		}
		rows := [][]string{{"ID", "Provider", "Version", "Controller", "Publish/Unpublish"}}
		for _, p := range ps {
			rows = append(rows, []string{p.ID, orDash(p.Provider), orDash(p.Version), orDash(p.ControllerEndpoint), fmt.Sprint(p.Capabilities.PublishUnpublish)})
		}
		c.Ui.Output(table(rows))
		return 0
	}
	p, _, err := cl.Plugin(ctx, rest[0], nil)
	if err != nil {
		return c.fail(err)
	}
	vols, _, err := cl.Volumes(ctx, "", p.ID, nil)
	if err != nil {
		return c.fail(err)
	}
	if c.json {
		return c.printJSON(p)
	}
	c.Ui.Output(kv([][2]string{
		{"ID", p.ID},
		{"Provider", orDash(p.Provider)},
		{"Version", orDash(p.Version)},
		{"Controller Endpoint", orDash(p.ControllerEndpoint)},
		{"Publish/Unpublish", fmt.Sprint(p.Capabilities.PublishUnpublish)},
		{"Volumes", fmt.Sprint(len(vols))},
	}))
	return 0
}

// PluginDeregisterCommand is `volhost plugin deregister ID`.
type PluginDeregisterCommand struct{ *Meta }

func (c *PluginDeregisterCommand) Synopsis() string { return "Remove a CSI plugin no volume uses" }
func (c *PluginDeregisterCommand) Help() string {
	return helpText("plugin deregister [options] ID", `
  Remove CSI plugin ID. Refused while volumes use it, naming them:
  deregister them first. There is no -force: a volume whose plugin is gone
  could never be released by a CSI call (the reference scheduler has none
  either).`, false)
}

func (c *PluginDeregisterCommand) Run(args []string) int {
	fs := c.flagSet("plugin deregister", false)
	rest, cl, ctx, stop, err := c.begin(fs, args, 1, 1, "plugin deregister [options] ID")
	if err != nil {
		return c.fail(err)
	}
	defer stop()
	if _, err := cl.DeregisterPlugin(ctx, rest[0]); err != nil {
		return c.fail(err)
	}
	c.Ui.Output(fmt.Sprintf("Deregistered plugin %q", rest[0]))
	return 0
}
