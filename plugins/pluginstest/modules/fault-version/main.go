// Command fault-version is a release policy that speaks ABI version 99. The
// host must refuse it at load, naming both versions, before any decision.
// Everything else about it is well formed, so the version marker is the
// only reason to refuse it.
//
// It does not use the guest SDK, whose version export always answers
// abi.Version: it defines the exports itself (exports_wasip1.go) around the
// pure functions in version.go.
package main

func main() {}
