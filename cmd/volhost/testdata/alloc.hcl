# The workload that will claim vol1; "volhost alloc update -status complete web-1"
# ends it, and the volume watcher then releases its claim.
alloc "web-1" {
  namespace     = "default"
  node_id       = "node1"
  job_id        = "web"
  client_status = "running"
}
