volume "vol9" {
  external_id     = "disk-9"
  plugin_id       = "no-such-plugin"
  access_mode     = "single-node-writer"
  attachment_mode = "file-system"
}
