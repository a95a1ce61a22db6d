# A single-writer filesystem volume.
volume "vol1" {
  external_id     = "disk-1"
  plugin_id       = "demo"
  access_mode     = "single-node-writer"
  attachment_mode = "file-system"
}
