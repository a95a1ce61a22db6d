# grace-policy: waits 30s after an allocation ends before releasing.
kind    = "release-policy"
version = "4.0.0"
default = true
limits {
  memory_pages = 256
  call_timeout = "5s"
  pool_size    = 2
  max_calls    = 10000
}
config = { grace = "30s" }
