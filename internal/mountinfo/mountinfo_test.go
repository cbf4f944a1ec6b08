package mountinfo

import "testing"

func TestParse(t *testing.T) {
	testCases := []struct {
		line       string
		mountPoint string
		fsType     string
		ok         bool
	}{
		{"36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue", "/mnt2", "ext3", true},
		{"25 30 0:23 / /run/b\\040dir/rootfs/proc rw,nosuid shared:13 - proc proc rw", "/run/b dir/rootfs/proc", "proc", true},
		{"99 1 0:5 / /x rw - proc proc rw", "/x", "proc", true},
		{"short line", "", "", false},
		{"1 2 3:4 / /p rw no separator here", "", "", false},
	}
	for _, tc := range testCases {
		mp, fs, ok := Parse(tc.line)
		if mp != tc.mountPoint || fs != tc.fsType || ok != tc.ok {
			t.Errorf("%q: got %q %q %v", tc.line, mp, fs, ok)
		}
	}
}

// TestUnder: this process's /proc is a procfs mount, found under "/" by type and under itself,
// and not listed as any other type.
func TestUnder(t *testing.T) {
	for _, tc := range []struct {
		dir, fsType string
		want        bool
	}{{"/", "proc", true}, {"/proc", "", true}, {"/proc", "ext4", false}, {"/pro", "", false}} {
		got, err := Under(tc.dir, tc.fsType)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, m := range got {
			found = found || m == "/proc"
		}
		if found != tc.want {
			t.Errorf("Under(%q, %q) = %v: /proc listed %v, want %v", tc.dir, tc.fsType, got, found, tc.want)
		}
	}
}
