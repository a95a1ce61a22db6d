volume "vol9" {
  external_id     = "disk-9"
  plugin_id       = "gce-pd"
  access_mode     = "single-writer"
  attachment_mode = "file-system"
}
