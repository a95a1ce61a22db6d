dev = true
watcher {
  controler_concurrency = 4
}
