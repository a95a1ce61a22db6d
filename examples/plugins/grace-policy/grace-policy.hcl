# Waits `grace` after an allocation ends before releasing its claims; releases
# at once (skipping the node step) when the node is down or gone.
kind       = "release-policy"
version    = "1.0.1"
plugin_ids = []
volumes    = ["batch/*"]
default    = false
limits {
  memory_pages = 256
  call_timeout = "1s"  # a Go guest may run a GC inside one call: leave headroom
  pool_size    = 4
  max_calls    = 10000
}
config = { grace = "30s" }
sha256 = ""
