# Bad: installed with fault-version's bytes (ABI version 99), refused at load.
kind    = "release-policy"
version = "2.0.0"
default = true
limits {
  memory_pages = 256
  call_timeout = "5s"
  pool_size    = 2
  max_calls    = 10000
}
