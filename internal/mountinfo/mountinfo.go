// Package mountinfo reads this process's mount table (/proc/self/mountinfo).
package mountinfo

import (
	"bufio"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
)

// Under returns the mount points at or under dir, deepest first, of file system type fsType
// ("" for any).
func Under(dir, fsType string) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("read mounts: %w", err)
	}
	defer f.Close()
	var out []string
	prefix := strings.TrimSuffix(dir, "/") + "/"
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		mountPoint, fs, ok := Parse(sc.Text())
		if ok && (fsType == "" || fs == fsType) && (mountPoint == dir || strings.HasPrefix(mountPoint, prefix)) {
			out = append(out, mountPoint)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read mounts: %w", err)
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out, nil
}

// Parse returns the mount point and file system type of a mountinfo line:
// "id parent major:minor root mountpoint options [optional...] - fstype source super".
func Parse(line string) (mountPoint, fsType string, ok bool) {
	fields := strings.Fields(line)
	if len(fields) < 7 {
		return "", "", false
	}
	for i := 6; i < len(fields)-1; i++ {
		if fields[i] == "-" {
			return unescape(fields[4]), fields[i+1], true
		}
	}
	return "", "", false
}

// unescape undoes the kernel's octal escapes (\040 for a space…).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
