# fault-policy in mode malformed: answers bytes that do not decode.
kind       = "release-policy"
version    = "1.0.0"
plugin_ids = []
volumes    = ["fault/malformed-*"]
default    = false
limits {
  memory_pages = 256
  call_timeout = "100ms"
  pool_size    = 2
  max_calls    = 10000
}
config = { mode = "malformed" }
sha256 = ""
