package confined

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/gpu-runtime/gpu-runtime/pkg/oci"
)

// Cred is a container user's identity for file access: what its processes would be allowed
// to read (process.user of the spec).
type Cred struct {
	UID, GID uint32
	Groups   []uint32
}

// UserOf is the file-system identity of a spec's process for reading its image's files:
// process.user; nil where the container has a user namespace (a hook there already acts as
// the container's root) or no process.
func UserOf(p *specs.Process, l *specs.Linux) *Cred {
	if p == nil || oci.HasUserNamespace(l) {
		return nil
	}
	return &Cred{UID: p.User.UID, GID: p.User.GID, Groups: p.User.AdditionalGids}
}

// maxGroups is the kernel's NGROUPS_MAX.
const maxGroups = 65536

// asReader runs fn with the reader's file-system credentials on a locked thread: the file
// system uid and gid (setfsuid, setfsgid) and the supplementary groups. A file-system uid
// other than 0 drops CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH and CAP_FOWNER from the thread's
// effective set, so the kernel checks the file's mode as for the container's user; changing
// it back to 0 restores them. Go's syscall.Setgroups changes every thread of the process,
// so the groups are set with the raw system call, for this thread alone.
func (r *Root) asReader(fn func() error) error {
	c := r.cred
	if c == nil || (c.UID == 0 && c.GID == 0 && len(c.Groups) == 0) {
		return fn()
	}
	if len(c.Groups) > maxGroups {
		return fmt.Errorf("the container's user has %d groups, more than the kernel allows", len(c.Groups))
	}
	runtime.LockOSThread()
	groups, err := unix.Getgroups()
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("read the process's groups: %w", err)
	}
	own := make([]uint32, len(groups))
	for i, g := range groups {
		own[i] = uint32(g) //nolint:gosec // G115: group ids from getgroups(2) are gid_t, 32-bit
	}
	restore := func() error {
		errs := []error{setfsid(unix.SYS_SETFSUID, 0), setfsid(unix.SYS_SETFSGID, 0), setgroups(own)}
		if err := errors.Join(errs...); err != nil {
			// The thread keeps the container user's credentials: it stays locked, and Go
			// ends a locked thread with its goroutine, never reusing it.
			return fmt.Errorf("take back root's file access: %w", err)
		}
		runtime.UnlockOSThread()
		return nil
	}
	if err := errors.Join(setgroups(c.Groups), setfsid(unix.SYS_SETFSGID, c.GID), setfsid(unix.SYS_SETFSUID, c.UID)); err != nil {
		return errors.Join(fmt.Errorf("read as uid %d gid %d: %w", c.UID, c.GID, err), restore())
	}
	ferr := fn()
	return errors.Join(ferr, restore())
}

// setfsid sets the thread's file-system uid or gid (trap SYS_SETFSUID or SYS_SETFSGID) and
// checks that it took: the system calls report no error, only the previous value.
func setfsid(trap uintptr, id uint32) error {
	_, _, _ = unix.RawSyscall(trap, uintptr(id), 0, 0)
	// -1 is never a valid id: the call only returns the current value.
	cur, _, _ := unix.RawSyscall(trap, ^uintptr(0), 0, 0)
	if cur != uintptr(id) {
		return fmt.Errorf("set file-system id %d: it is %d", id, cur)
	}
	return nil
}

// setgroups sets the calling thread's supplementary groups.
func setgroups(list []uint32) error {
	var p unsafe.Pointer
	if len(list) > 0 {
		p = unsafe.Pointer(&list[0]) //nolint:gosec // G103: setgroups(2) takes the address of a gid_t array, which stays alive until it returns
	}
	if _, _, errno := unix.RawSyscall(unix.SYS_SETGROUPS, uintptr(len(list)), uintptr(p), 0); errno != 0 {
		return fmt.Errorf("setgroups: %w", errno)
	}
	return nil
}
