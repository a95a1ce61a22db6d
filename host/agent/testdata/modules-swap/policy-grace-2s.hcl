# grace-policy with a 2s grace: the successor of policy-grace.hcl (30s) in
# TestModuleSwapRejudgesAtOnce.
kind    = "release-policy"
version = "4.1.0"
default = true
limits {
  memory_pages = 256
  call_timeout = "5s"
  pool_size    = 2
  max_calls    = 10000
}
config = { grace = "2s" }
