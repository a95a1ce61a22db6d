# CSI adapter for the GCE persistent-disk driver (pd.csi.storage.gke.io).
kind       = "csi-adapter"
version    = "1.0.0"
plugin_ids = ["gcepd", "gcepd-*"]
volumes    = []
default    = false
limits {
  memory_pages = 256
  call_timeout = "1s"  # a Go guest may run a GC inside one call: leave headroom
  pool_size    = 4
  max_calls    = 10000
}
config = {}
sha256 = ""
