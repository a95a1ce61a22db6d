data_dir   = "/var/lib/volhost"
log_level  = "debug"
module_dir = "/etc/volhost/modules"

http {
  address = "127.0.0.1:5757"
}

watcher {
  controller_concurrency = 4
  stuck_after            = "30m"
  max_attempts           = 50
  volume_rate_limit      = 1
  volume_rate_burst      = 3
}

escape_hatch {
  auto_force_deregister = true
  after                 = "15m"
}
