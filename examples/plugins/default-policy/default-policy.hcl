# The default release policy (abi/defaultpolicy) as a Wasm module. It serves
# every volume no other release-policy module matches.
kind       = "release-policy"
version    = "1.0.0"
plugin_ids = []
volumes    = []
default    = true
limits {
  memory_pages = 256
  call_timeout = "1s"  # a Go guest may run a GC inside one call: leave headroom
  pool_size    = 4
  max_calls    = 10000
}
config = {}
sha256 = ""
