# A CSI plugin. With controller_endpoint set, the agent probes the driver
# (GetPluginInfo, Probe, ControllerGetCapabilities) when it is registered;
# without one, claims skip the controller step (a node-only driver).
plugin "demo" {
}
