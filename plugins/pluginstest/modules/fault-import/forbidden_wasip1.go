//go:build wasip1

package main

// forbidden is not a function volhost offers: importing it must get the
// module refused at load.
//
//go:wasmimport env forbidden
func forbidden()
