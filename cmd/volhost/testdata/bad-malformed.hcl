volume "vol9" {
  external_id = "disk-9"
  plugin_id   = 
}
