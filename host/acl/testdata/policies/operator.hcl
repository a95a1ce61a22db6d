# An operator: everything but ACL administration and snapshots.
namespace "*" {
  policy       = "write"
  capabilities = ["force-deregister"]
}
node {
  policy = "write"
}
operator {
  policy = "write"
}
modules {
  policy = "reload"
}
events {
  policy = "read"
}
