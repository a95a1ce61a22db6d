# fault-policy in mode allocate: healthy decisions, 256 KiB of garbage per call.
# max_calls is high so the bounded-memory test (100,000 calls) sees the guest GC
# keep memory bounded, not instance recycling.
kind       = "release-policy"
version    = "1.0.0"
plugin_ids = []
volumes    = ["alloc/*"]
default    = false
limits {
  memory_pages = 256
  call_timeout = "100ms"
  pool_size    = 1
  max_calls    = 1000000
}
config = { mode = "allocate" }
sha256 = ""
