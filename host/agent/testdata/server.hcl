data_dir = "/var/lib/volhost"
node_id  = "s2"

server {
  enabled            = true
  join               = ["10.0.0.1:4747", "10.0.0.3:4747"]
  retry_max_interval = "10s"

  raft_multiplier         = 5
  raft_snapshot_threshold = 16384
  raft_snapshot_interval  = "5m"
  raft_trailing_logs      = 20000
}
