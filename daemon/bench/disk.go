package main

import (
	"fmt"
	"log"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	bolt "go.etcd.io/bbolt"
)

// diskBuild is one binary of the data file table.
type diskBuild struct {
	name   string
	binary *string
}

// diskParts are the parts of a data file that the table splits it into.
// Each bucket's pages include its share of branch pages.
var diskParts = []string{"idempotency_records", "idempotency_expiry", "idempotency_in_flight", "intents", "intents_by_owner"}

// diskTable runs each count of fresh creates against each build, on a
// fresh data file, and prints the file's bytes per create, whole and by
// part. The builds are measured in turn for each count, in the same run.
func diskTable(counts []int, builds []diskBuild) {
	fmt.Printf("| build | creates | file KiB/create | disk blocks KiB/create | pages used KiB/create | free pages KiB/create |")
	for _, p := range diskParts {
		fmt.Printf(" %s KiB/create |", p)
	}
	fmt.Printf(" with / without (file) |\n|---|---:|---:|---:|---:|---:|%s---:|\n", strings.Repeat("---:|", len(diskParts)))
	for _, n := range counts {
		var without float64
		for _, b := range builds {
			f := measureDisk(*b.binary, n)
			per := func(bytes int64) float64 { return float64(bytes) / 1024 / float64(n) }
			if b.name == "without" {
				without = per(f.size)
			}
			ratio := "—"
			if b.name != "without" && without > 0 {
				ratio = fmt.Sprintf("%.2fx", per(f.size)/without)
			}
			fmt.Printf("| %s | %d | %.2f | %.2f | %.2f | %.2f |", b.name, n, per(f.size), per(f.blocks), per(f.used), per(f.free))
			for _, p := range diskParts {
				fmt.Printf(" %.3f |", per(f.parts[p]))
			}
			fmt.Printf(" %s |\n", ratio)
		}
	}
}

// diskFigures is what measureDisk found in one data file, in bytes.
type diskFigures struct {
	size   int64            // the file's length
	blocks int64            // what the file takes on disk: bbolt grows it with holes
	used   int64            // pages up to the high-water mark
	free   int64            // free and pending pages below it
	parts  map[string]int64 // each bucket's pages
}

// measureDisk makes n fresh creates against a fresh server of binary at
// c=64, stops it and measures its data file.
func measureDisk(binary string, n int) diskFigures {
	dir, err := os.MkdirTemp("", "paymentsd-disk")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db := filepath.Join(dir, "bench.db")
	srv := start(binary, db)
	b := binary
	sc := scenario{name: "disk", binary: &b, concurrency: 64, requests: n, key: *diskKey, body: body}
	saved := *scale
	*scale = 1 // the count is the measurement's, not a load
	reps := load(sc, []*server{srv}, []string{"--insecure"})
	*scale = saved
	srv.stop()
	if _, count := summarize(reps); count != uint64(n) {
		log.Fatalf("%s: %d answers to %d creates", binary, count, n)
	}
	for _, rep := range reps {
		for _, d := range rep.Details {
			if d.Status != "OK" {
				log.Fatalf("%s: a create answered %s", binary, d.Status)
			}
		}
	}
	return inspect(db)
}

// inspect measures the data file at path, which no process holds.
func inspect(path string) diskFigures {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		log.Fatal(err)
	}
	f := diskFigures{size: st.Size, blocks: st.Blocks * 512, parts: map[string]int64{}}
	b, err := bolt.Open(path, 0o600, nil) // writable, so that bbolt reads the freelist; nothing commits
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()
	s := b.Stats()
	err = b.View(func(tx *bolt.Tx) error {
		f.used = tx.Size()
		f.free = int64(s.FreePageN+s.PendingPageN) * int64(tx.DB().Info().PageSize)
		for _, p := range diskParts {
			if bk := tx.Bucket([]byte(p)); bk != nil {
				bs := bk.Stats()
				f.parts[p] = int64(bs.BranchAlloc + bs.LeafAlloc)
			}
		}
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	return f
}

// parseCounts reads -disk's list of counts.
func parseCounts(s string) []int {
	var counts []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			log.Fatalf("-disk: %q is not a count of creates", f)
		}
		counts = append(counts, n)
	}
	return slices.Clip(counts)
}
