volume "vol9" {
  external_id     = "disk-9"
  plugin_id       = "gce-pd"
  access_mode     = "single-node-writer"
  attachment_mode = "file-system"
  size_gb         = 10
}
