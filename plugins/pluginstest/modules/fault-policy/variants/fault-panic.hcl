# fault-policy in mode panic: the SDK recovers and answers Error "panic: ...".
kind       = "release-policy"
version    = "1.0.0"
plugin_ids = []
volumes    = ["fault/panic-*"]
default    = false
limits {
  memory_pages = 256
  call_timeout = "100ms"
  pool_size    = 2
  max_calls    = 10000
}
config = { mode = "panic" }
sha256 = ""
