# A client node. Add a plugin block with the driver's node endpoint, e.g.
#   plugin "demo" { endpoint = "unix:///run/csi/demo.sock" }
# and the agent records the external node ID that NodeGetInfo reports.
node "node1" {
  status   = "ready"
  root_dir = "/tmp/volhost-walkthrough"
}
