kind = "release-policy"
version = "1.2.3"
plugin_ids = ["gcepd", "ebs-*"]
volumes = ["default/web-*", "prod/db"]
default = false
limits {
  memory_pages = 128
  call_timeout = "250ms"
  pool_size = 2
  max_calls = 500
  table_elements = 4096
}
config = { grace = "30s" }
sha256 = "ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef0123456789"
