# Test csi-adapter speaking ABI 1.1 (volhost_confirm_fence): confirms the
# fence of a lost node whose instance is listed in config "terminated".
kind       = "csi-adapter"
version    = "1.1.0"
plugin_ids = ["fence-*"]
limits {
  memory_pages = 256
  call_timeout = "1s"
  pool_size    = 2
}
config = { terminated = "i-terminated" }
