# fence-adapter with config mode = "confirm" (see ../README.md).
kind       = "csi-adapter"
version    = "1.1.0"
plugin_ids = []
limits {
  memory_pages = 256
  call_timeout = "1s"
  pool_size    = 2
}
config = { mode = "confirm" }
