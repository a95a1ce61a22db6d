package state

import (
	"os"
	"testing"
)

// Every test of the package checks ownRows against the transaction's own
// reads (own_rows.go): a write that bypassed insertRow or deleteRow would
// make a read answer from the state before it, and fail here.
func TestMain(m *testing.M) {
	ownRowsCheck = true
	os.Exit(m.Run())
}
