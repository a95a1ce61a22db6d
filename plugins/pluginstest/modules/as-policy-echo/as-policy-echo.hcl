# Test module: echoes the AssemblyScript SDK's view of a PolicyRequest (plugins/asguest_test.go TestASPolicyRequestViews).
kind    = "release-policy"
version = "1.0.0"
limits {
  memory_pages = 16
  call_timeout = "1s"
  pool_size    = 1
}
