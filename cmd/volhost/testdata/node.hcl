# A client node with the plugin's CSI node service. The agent calls
# NodeGetInfo on the endpoint and records the external node ID.
node "node1" {
  status   = "ready"
  root_dir = "/tmp/volhost-node1"
  meta     = { zone = "us-central1-a" }

  plugin "gce-pd" {
    endpoint = "unix:///tmp/volhost-csi/node1.sock"
  }
}
