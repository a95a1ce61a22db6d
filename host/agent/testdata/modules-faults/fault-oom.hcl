# fault-policy in mode oom, for the "bad" plugin's volume bad-oom only.
kind    = "release-policy"
version = "1.0.0"
volumes = ["default/bad-oom"]
limits {
  memory_pages = 256
  call_timeout = "5s"
  pool_size    = 2
  max_calls    = 10000
}
config = { mode = "oom" }
