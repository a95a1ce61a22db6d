# The default policy as a Wasm module, serving every volume no fault module
# selects (the "good" plugin's volumes).
kind    = "release-policy"
version = "1.0.0"
default = true
limits {
  memory_pages = 256
  call_timeout = "5s"
  pool_size    = 2
  max_calls    = 10000
}
