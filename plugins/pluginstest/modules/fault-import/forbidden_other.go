//go:build !wasip1

package main

// forbidden stands in for the wasm import off wasm, so the logic compiles
// and is testable natively.
func forbidden() { panic("env.forbidden called") }
