# Good: the default policy, version 1.0.0.
kind    = "release-policy"
version = "1.0.0"
default = true
limits {
  memory_pages = 256
  call_timeout = "5s"
  pool_size    = 2
  max_calls    = 10000
}
