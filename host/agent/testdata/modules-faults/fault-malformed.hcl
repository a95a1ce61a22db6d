# fault-policy in mode malformed, for the "bad" plugin's volume bad-malformed only.
kind    = "release-policy"
version = "1.0.0"
volumes = ["default/bad-malformed"]
limits {
  memory_pages = 256
  call_timeout = "5s"
  pool_size    = 2
  max_calls    = 10000
}
config = { mode = "malformed" }
