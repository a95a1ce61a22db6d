# fault-policy in mode spin, for the "bad" plugin's volume bad-spin only.
kind    = "release-policy"
version = "1.0.0"
volumes = ["default/bad-spin"]
limits {
  memory_pages = 256
  call_timeout = "200ms"
  pool_size    = 2
  max_calls    = 10000
}
config = { mode = "spin" }
