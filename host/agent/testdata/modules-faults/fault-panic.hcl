# fault-policy in mode panic, for the "bad" plugin's volume bad-panic only.
kind    = "release-policy"
version = "1.0.0"
volumes = ["default/bad-panic"]
limits {
  memory_pages = 256
  call_timeout = "5s"
  pool_size    = 2
  max_calls    = 10000
}
config = { mode = "panic" }
