# What a node agent needs: its own objects, claims, no force.
namespace "default" {
  capabilities = ["read", "claim"]
}
node {
  policy = "write"
}
