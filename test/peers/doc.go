// Package peers is the root of a separate Go module holding the real CSI
// drivers the end-to-end tests run volhost against (README "End-to-end
// tests and benchmarks"): cmd/gcepd serves the GCE persistent-disk driver with its fake
// cloud, cmd/mockcsi the csi-test gomock driver, e2e/ drives the real volhost
// binary against them, and cmd/benchplot draws the benchmark plot. It is a
// module of its own so the drivers' Kubernetes dependencies never reach the
// product's go.mod.
package peers
