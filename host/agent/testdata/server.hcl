data_dir = "/var/lib/volhost"
node_id  = "s2"

server {
  enabled            = true
  join               = ["10.0.0.1:4747", "10.0.0.3:4747"]
  retry_max_interval = "10s"
}
