volume "vol9" {
  plugin_id       = "gce-pd"
  access_mode     = "single-node-writer"
  attachment_mode = "file-system"
}
