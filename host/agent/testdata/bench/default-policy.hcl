kind    = "release-policy"
version = "1.0.0"
default = true
limits {
  call_timeout = "1s"
  pool_size    = 4
}
