namespace "team-*" {
  policy = "read"
}
namespace "team-secret" {
  policy = "deny"
}
events {
  policy = "deny"
}
