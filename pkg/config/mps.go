package config

import (
	"fmt"
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/gpu-runtime/gpu-runtime/internal/quote"
)

// MPSConfig is the [mps] table: MPS shares, each served by its own control daemon with the
// administrator's defaults. A container joins a share; it cannot raise its limits.
type MPSConfig struct {
	// Root holds <root>/<share>/{pipe,client,log,shm}.
	Root string `toml:"root"`
	// Share is the share every GPU container joins whatever it asks, if set: a runtime handler
	// (Kubernetes RuntimeClass) per share reads a config of its own.
	Share string `toml:"share"`
	// Shares are the shares by name ([mps.shares.<name>]).
	Shares map[string]MPSShare `toml:"shares"`
}

// MPSShare is one share: the GPUs its server uses and the defaults its daemon sets.
type MPSShare struct {
	// Devices are the GPUs, by host index or UUID (whole GPUs: MPS on MIG is not supported).
	Devices []string `toml:"devices"`
	// ActiveThreadPercentage is the share of each GPU's SMs (1-100; 0: not set, MPS's 100).
	ActiveThreadPercentage int `toml:"active-thread-percentage"`
	// PinnedMemoryLimit is the device memory a client may pin per GPU: "60G", "61440M"
	// ("60GiB", "60GB" are read as 60G); "" = none.
	PinnedMemoryLimit string `toml:"pinned-memory-limit"`
	// UID is the user the share serves: MPS servers run as their first client's UID unless
	// in multi-user mode, so a container of another user cannot use it.
	UID int `toml:"uid"`
}

// A share's directories: the daemon's pipe (clients connect there) and log directories, and
// the tmpfs its servers and clients share as /dev/shm.
func (m MPSConfig) PipeDir(share string) string { return filepath.Join(m.Root, share, "pipe") }
func (m MPSConfig) LogDir(share string) string  { return filepath.Join(m.Root, share, "log") }
func (m MPSConfig) ShmDir(share string) string  { return filepath.Join(m.Root, share, "shm") }

// ClientDir is what a share's containers see of its pipe directory: only the control socket.
func (m MPSConfig) ClientDir(share string) string { return filepath.Join(m.Root, share, "client") }

// PIDFile holds the pid of the share's control daemon, written by gpu-ctk mps start.
func (m MPSConfig) PIDFile(share string) string { return filepath.Join(m.Root, share, "daemon.pid") }

// ShareNames lists the configured shares, sorted.
func (m MPSConfig) ShareNames() []string { return slices.Sorted(maps.Keys(m.Shares)) }

// shareNameRE: a share's name is a directory name under Root and a volume-mount path element.
var shareNameRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`) })

// ValidShareName says whether name can name an MPS share (a directory under mps.root).
func ValidShareName(name string) bool { return shareNameRE().MatchString(name) }

// memoryLimitRE: a number and a unit, M or G as set_default_device_pinned_mem_limit takes it,
// or with the B/iB spellings people write.
var memoryLimitRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^([0-9]{1,9})\s*(M|MB|MiB|G|GB|GiB)$`) })

// MPSMemoryLimit is a pinned-memory limit in the form MPS accepts: "60G", "61440M".
func MPSMemoryLimit(s string) (string, bool) {
	m := memoryLimitRE().FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return "", false
	}
	n, _ := strconv.Atoi(m[1])
	if n == 0 {
		return "", false
	}
	return m[1] + m[2][:1], true
}

// clean validates the shares: one problem per bad key, naming the share.
func (m *MPSConfig) clean(bad func(key string, value any, want string)) {
	if _, ok := m.Shares[m.Share]; m.Share != "" && !ok {
		bad("mps.share", m.Share, "one of the shares of [mps.shares]")
	}
	for _, name := range m.ShareNames() {
		s := m.Shares[name]
		key := quote.TOMLKey("mps", "shares", name)
		if !shareNameRE().MatchString(name) {
			bad(key, name, "a share name of letters, digits, '.', '_' and '-' (63 at most)")
			continue
		}
		if len(s.Devices) == 0 {
			bad(key+".devices", s.Devices, "the share's GPUs, by index or UUID")
		}
		for i, d := range s.Devices {
			switch {
			case strings.Contains(d, ":") || strings.HasPrefix(strings.ToUpper(d), "MIG-"):
				bad(fmt.Sprintf("%s.devices[%d]", key, i), d, "a whole GPU: MPS on MIG devices is not supported")
			case d == "" || d == "all" || strings.ContainsAny(d, ", "):
				bad(fmt.Sprintf("%s.devices[%d]", key, i), d, "one GPU index or UUID")
			}
		}
		if p := s.ActiveThreadPercentage; p < 0 || p > 100 {
			bad(key+".active-thread-percentage", strconv.Itoa(p), "1 to 100 (0 or absent: not set)")
		}
		if s.PinnedMemoryLimit != "" {
			if _, ok := MPSMemoryLimit(s.PinnedMemoryLimit); !ok {
				bad(key+".pinned-memory-limit", s.PinnedMemoryLimit, `a size MPS accepts, such as "60G" or "61440M"`)
			}
		}
		if s.UID < 0 {
			bad(key+".uid", strconv.Itoa(s.UID), "a user id")
		}
	}
}
