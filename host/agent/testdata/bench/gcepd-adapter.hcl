kind       = "csi-adapter"
version    = "1.0.0"
plugin_ids = ["gcepd"]
limits {
  call_timeout = "1s"
  pool_size    = 4
}
