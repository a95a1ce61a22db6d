# A single-writer filesystem volume backed by a GCE persistent disk.
volume "vol1" {
  namespace       = "default"
  name            = "web data"
  external_id     = "projects/demo/zones/us-central1-a/disks/vol1"
  plugin_id       = "gce-pd"
  access_mode     = "single-node-writer"
  attachment_mode = "file-system"
  fs_type         = "ext4"
  mount_flags     = ["noatime"]
}
