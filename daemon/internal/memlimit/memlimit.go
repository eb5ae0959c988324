// Package memlimit gives the Go runtime a soft memory limit from the
// memory limit of the process's cgroup, as a container or a systemd unit
// sets it. Without one, the garbage collector lets the heap grow to twice
// what is live, whatever the container allows. A burst of work that
// leaves much garbage (large answers, many of them) then gets the process
// killed for memory it did not need.
package memlimit

import (
	"bufio"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"time"
)

// Share is the part of the cgroup's limit the Go heap is held to. The
// rest is for what the garbage collector does not count: bbolt's mapped
// pages and the kernel's socket buffers, charged to the same cgroup, and
// goroutine stacks.
const Share = 0.4

// Follow sets the soft memory limit to Share of the cgroup's limit, and
// sets it again when the limit changes (a pod resized in place), looking
// every interval until ctx ends. It does nothing when GOMEMLIMIT is set:
// the operator has said. Each change is logged.
func Follow(ctx context.Context, logger *slog.Logger, interval time.Duration) {
	if os.Getenv("GOMEMLIMIT") != "" {
		logger.Info("memory limit from GOMEMLIMIT", "go_soft_limit_bytes", debug.SetMemoryLimit(-1))
		return
	}
	last := int64(-1) // no limit read yet: the first is logged, whatever it is
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if limit := cgroupLimit("/proc/self/cgroup", "/sys/fs/cgroup"); limit != last {
			last = limit
			apply(logger, limit)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// apply sets the soft limit for a cgroup limit of limit bytes (0: none).
func apply(logger *slog.Logger, limit int64) {
	if limit <= 0 {
		debug.SetMemoryLimit(1<<63 - 1)
		logger.Info("memory limit: the cgroup sets none, nor does GOMEMLIMIT")
		return
	}
	soft := int64(float64(limit) * Share)
	debug.SetMemoryLimit(soft)
	logger.Info("memory limit from the cgroup", "cgroup_limit_bytes", limit, "go_soft_limit_bytes", soft)
}

// cgroupLimit is the memory limit of this process's cgroup, read from
// the cgroup file procCgroup under the cgroup mount root; 0 when there is
// none or it cannot be read. cgroup v1's memory controller is read first,
// then v2's.
func cgroupLimit(procCgroup, root string) int64 {
	f, err := os.Open(procCgroup)
	if err != nil {
		return 0
	}
	defer f.Close()
	var v1, v2 string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// hierarchy-ID:controllers:path
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "":
			v2 = parts[2]
		case strings.Contains(","+parts[1]+",", ",memory,"):
			v1 = parts[2]
		}
	}
	if v1 != "" {
		return readLimit(filepath.Join(root, "memory", v1, "memory.limit_in_bytes"))
	}
	if v2 != "" {
		return readLimit(filepath.Join(root, v2, "memory.max"))
	}
	return 0
}

// unlimited is what cgroup v1 reports for no limit, or more: a limit past
// it is none.
const unlimited = 1 << 62

// readLimit reads a limit file: a number of bytes, or "max" (none).
func readLimit(path string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || n <= 0 || n >= unlimited {
		return 0
	}
	return n
}
