# fault-policy, healthy by default: set config mode, or the volume context key fault.mode per request (README.md).
kind       = "release-policy"
version    = "1.0.0"
plugin_ids = []
volumes    = ["fault/*"]
default    = false
limits {
  memory_pages = 256
  call_timeout = "100ms"
  pool_size    = 2
  max_calls    = 10000
}
config = { mode = "ok" }
sha256 = ""
