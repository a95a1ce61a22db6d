package testutil

import "sync"

// Repeat calls f from a goroutine of its own, again and again, until f
// returns false or stop is called; stop waits for the call in flight to
// return, so what f counted is final once it does. It keeps a load up
// while a test changes something under it (a certificate rotated, a
// token revoked, a module swapped). stop may be called more than once.
func Repeat(f func() bool) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			if !f() {
				return
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() { close(done) })
		wg.Wait()
	}
}
