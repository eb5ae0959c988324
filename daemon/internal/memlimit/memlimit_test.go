package memlimit

import (
	"os"
	"path/filepath"
	"testing"
)

// write makes the file path under dir, with its directories.
func write(t *testing.T, dir, path, content string) {
	t.Helper()
	p := filepath.Join(dir, path)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestCgroupLimit(t *testing.T) {
	for _, c := range []struct {
		name, cgroup string
		files        map[string]string
		want         int64
	}{
		{"v1", "4:memory:/pods/a\n0::/\n", map[string]string{"memory/pods/a/memory.limit_in_bytes": "536870912\n"}, 512 << 20},
		{"v1 with other controllers", "5:cpu,memory:/a\n", map[string]string{"memory/a/memory.limit_in_bytes": "1048576"}, 1 << 20},
		{"v1 unlimited", "4:memory:/\n", map[string]string{"memory/memory.limit_in_bytes": "9223372036854771712\n"}, 0},
		{"v2", "0::/system.slice/paymentsd.service\n", map[string]string{"system.slice/paymentsd.service/memory.max": "268435456\n"}, 256 << 20},
		{"v2 max", "0::/x\n", map[string]string{"x/memory.max": "max\n"}, 0},
		{"no file", "0::/gone\n", nil, 0},
		{"garbage", "not a cgroup line\n", nil, 0},
		{"memory named in a path only", "3:cpu:/memory\n", map[string]string{"memory/memory/memory.limit_in_bytes": "1024"}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			write(t, dir, "proc/cgroup", c.cgroup)
			for path, content := range c.files {
				write(t, dir, "cg/"+path, content)
			}
			if got := cgroupLimit(filepath.Join(dir, "proc/cgroup"), filepath.Join(dir, "cg")); got != c.want {
				t.Errorf("cgroupLimit = %d, want %d", got, c.want)
			}
		})
	}
}
