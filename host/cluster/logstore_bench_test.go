package cluster

import (
	"fmt"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

// BenchmarkLogStoreAfterCompaction: what one small raft write costs in a
// log file that a large load and a compaction left with a long freelist,
// bbolt's default options (the freelist written on every commit) against
// the log store's (openLogStore: not synced, a hash map). Each side's
// file gets 200 entries of 512 KiB (the volume load's 1,000-per-request
// entries at 100 MiB instead of 500), then all but the last is deleted
// (a compaction), then 2,000 appends of 1 KiB entries are timed one per
// commit, as claims arrive; 5 rounds, sides interleaved, medians with
// min and max of the time, the process CPU and the bytes allocated per
// append, and of the file's open afterwards (a restart).
//
//	go test -run '^$' -bench '^BenchmarkLogStoreAfterCompaction$' -benchtime 1x ./host/cluster/
func BenchmarkLogStoreAfterCompaction(b *testing.B) {
	const big, bigSize, small, smallSize, rounds = 200, 512 << 10, 2000, 1 << 10, 5
	open := map[string]func(string) (*raftboltdb.BoltStore, error){
		"bbolt defaults": func(p string) (*raftboltdb.BoltStore, error) { return raftboltdb.New(raftboltdb.Options{Path: p}) },
		"log store":      openLogStore,
	}
	sides := []string{"bbolt defaults", "log store"}
	us := map[string][]float64{}
	alloc := map[string][]float64{}
	cpu := map[string][]float64{}
	opens := map[string][]float64{}
	for range b.N {
		for r := range rounds {
			for i := range sides {
				side := sides[(i+r)%len(sides)]
				path := filepath.Join(b.TempDir(), "raft.db")
				st, err := open[side](path)
				if err != nil {
					b.Fatal(err)
				}
				payload := make([]byte, bigSize)
				for j := uint64(1); j <= big; j++ {
					if err := st.StoreLog(&raft.Log{Index: j, Term: 1, Type: raft.LogCommand, Data: payload}); err != nil {
						b.Fatal(err)
					}
				}
				if err := st.DeleteRange(1, big-1); err != nil {
					b.Fatal(err)
				}
				entry := make([]byte, smallSize)
				var ms0, ms1 runtime.MemStats
				runtime.ReadMemStats(&ms0)
				cpu0 := processCPU(b)
				start := time.Now()
				for j := uint64(big + 1); j <= big+small; j++ {
					if err := st.StoreLog(&raft.Log{Index: j, Term: 1, Type: raft.LogCommand, Data: entry}); err != nil {
						b.Fatal(err)
					}
				}
				d := time.Since(start)
				cpu[side] = append(cpu[side], float64((processCPU(b)-cpu0).Microseconds())/small)
				runtime.ReadMemStats(&ms1)
				us[side] = append(us[side], float64(d.Microseconds())/small)
				alloc[side] = append(alloc[side], float64(ms1.TotalAlloc-ms0.TotalAlloc)/small)
				if err := st.Close(); err != nil {
					b.Fatal(err)
				}
				// What a restart pays: opening the file again.
				start = time.Now()
				st, err = open[side](path)
				if err != nil {
					b.Fatal(err)
				}
				opens[side] = append(opens[side], float64(time.Since(start).Microseconds())/1000)
				st.Close()
			}
		}
	}
	var md strings.Builder
	md.WriteString("| side | append after compaction (us) | process CPU per append (us) | bytes allocated per append | open (ms) |\n| --- | ---: | ---: | ---: | ---: |\n")
	for _, side := range sides {
		fmt.Fprintf(&md, "| %s | %s | %s | %s | %s |\n", side, spread(us[side]), spread(cpu[side]), spread(alloc[side]), spread(opens[side]))
	}
	b.Logf("\n%s", md.String())
}

func spread(v []float64) string {
	s := slices.Clone(v)
	slices.Sort(s)
	return fmt.Sprintf("%.4g [%.4g-%.4g]", s[len(s)/2], s[0], s[len(s)-1])
}
