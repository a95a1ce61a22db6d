# The workload that claims vol1.
alloc "web-1" {
  node_id       = "node1"
  job_id        = "web"
  client_status = "running"
}
