# CSI adapter for the GCE persistent-disk driver as an AssemblyScript module
# (abi/guest-as), answering exactly as the Go gcepd-adapter. It serves the
# plugin ID "gcepd-as" so that, loaded from the same build directory, it
# does not contend with the Go adapter for "gcepd"; give it plugin_ids =
# ["gcepd"] (and drop the Go one) to select it.
kind       = "csi-adapter"
version    = "1.0.0"
plugin_ids = ["gcepd-as"]
volumes    = []
default    = false
limits {
  memory_pages = 16     # 1 MiB: the per-call arena stays within 2 pages
  call_timeout = "100ms" # no runtime, no GC: a call is a few microseconds
  pool_size    = 4
  max_calls    = 10000
}
config = {}
sha256 = ""
