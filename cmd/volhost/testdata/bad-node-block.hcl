node "node2" {
  plugin "gce-pd" {
    endpoint = "unix:///tmp/x.sock"
    external_node_id = "set-by-the-agent"
  }
}
