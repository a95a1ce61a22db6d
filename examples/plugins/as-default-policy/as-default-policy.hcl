# The default release policy (abi/defaultpolicy) as an AssemblyScript module
# (abi/guest-as). Not the default: it serves only volumes a manifest gives it
# (copy it with volumes = [...] or default = true to select it), so it never
# takes over from the Go default-policy in a shared build directory.
kind       = "release-policy"
version    = "1.0.0"
plugin_ids = []
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
