# fault-policy in mode spin: loops until the call timeout closes the instance.
kind       = "release-policy"
version    = "1.0.0"
plugin_ids = []
volumes    = ["fault/spin-*"]
default    = false
limits {
  memory_pages = 256
  call_timeout = "100ms"
  pool_size    = 2
  max_calls    = 10000
}
config = { mode = "spin" }
sha256 = ""
