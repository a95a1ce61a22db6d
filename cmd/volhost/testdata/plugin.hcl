# A CSI plugin with a controller service. The agent probes the endpoint
# (GetPluginInfo, ControllerGetCapabilities) when it is registered.
plugin "gce-pd" {
  controller_endpoint = "unix:///tmp/volhost-csi/controller.sock"
}
