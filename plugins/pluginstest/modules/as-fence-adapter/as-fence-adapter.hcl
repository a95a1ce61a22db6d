# AssemblyScript twin of fence-adapter (honest mode): ABI 1.1 volhost_confirm_fence.
kind       = "csi-adapter"
version    = "1.1.0"
plugin_ids = ["as-fence-*"]
limits {
  memory_pages = 16
  call_timeout = "1s"
  pool_size    = 2
}
config = { terminated = "i-terminated" }
