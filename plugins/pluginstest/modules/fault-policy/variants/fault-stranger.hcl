# fault-policy in mode stranger: adds a decision for an alloc ID not in the request.
kind       = "release-policy"
version    = "1.0.0"
plugin_ids = []
volumes    = ["fault/stranger-*"]
default    = false
limits {
  memory_pages = 256
  call_timeout = "100ms"
  pool_size    = 2
  max_calls    = 10000
}
config = { mode = "stranger" }
sha256 = ""
