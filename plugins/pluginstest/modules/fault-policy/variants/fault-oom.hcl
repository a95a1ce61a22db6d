# fault-policy in mode oom: allocates until the memory_pages cap (16 MiB) traps it.
kind       = "release-policy"
version    = "1.0.0"
plugin_ids = []
volumes    = ["fault/oom-*"]
default    = false
limits {
  memory_pages = 256
  call_timeout = "100ms"
  pool_size    = 2
  max_calls    = 10000
}
config = { mode = "oom" }
sha256 = ""
