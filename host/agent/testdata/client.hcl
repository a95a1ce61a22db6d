log_level = "debug"

client {
  enabled  = true
  servers  = ["10.0.0.1:4749", "10.0.0.2:4749"]
  node_id  = "node1"
  root_dir = "/var/lib/volhost-client"
  token    = "00000000-0000-0000-0000-000000000000"

  probe_interval = "15s"
  probe_timeout  = "3s"

  plugin "gce-pd" {
    socket = "unix:///run/csi/gce-pd.sock"
  }
  plugin "nfs" {
    socket = "unix:///run/csi/nfs.sock"
  }
}
