# fault-policy in mode trap: an unrecovered goroutine panic, wasm error: unreachable.
kind       = "release-policy"
version    = "1.0.0"
plugin_ids = []
volumes    = ["fault/trap-*"]
default    = false
limits {
  memory_pages = 256
  call_timeout = "100ms"
  pool_size    = 2
  max_calls    = 10000
}
config = { mode = "trap" }
sha256 = ""
