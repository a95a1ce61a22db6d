# Imports env.forbidden: the host must refuse it at load, naming the import.
kind       = "release-policy"
version    = "1.0.0"
plugin_ids = []
volumes    = ["fault/import-*"]
default    = false
limits {
  memory_pages = 256
  call_timeout = "100ms"
  pool_size    = 1
  max_calls    = 10000
}
config = {}
sha256 = ""
