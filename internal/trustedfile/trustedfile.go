// Package trustedfile opens the host files that decide what containers get — the discovery
// cache, the health file, CDI specs — only when root (or the user this process runs as) can
// be the one who wrote them, and reads them within a bound. It is the one place that rule is
// spelled: every reader of such a file applies it, and a writer of such files (a plugin
// writing CDI specs) can check its own with it.
//
// The rule, checked with fstat on an O_PATH handle opened without following a symbolic link
// at the path (its parent directories are the configuration's and are followed): a regular
// file, owned by root or by the user this process runs as, that no one else may write to
// (or of one exact mode), and of at most a given size. Opening it for reading happens only
// after the check, through that same handle, and without blocking: what is read is the inode
// that was checked, and a FIFO or a device planted at the path is never opened at all.
//
// ReadRegular is that bounded, non-blocking read without the owner rule, for the files a user
// names (gpu-runtime's configuration, the engines'): every bounded read of a regular file by
// path is one of the two.
package trustedfile

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// ErrUntrusted is wrapped by every error saying a file does not pass its Rule.
var ErrUntrusted = errors.New("untrusted file")

// Error says why a file does not pass its Rule: "<what> <path> ignored: <reason>".
type Error struct {
	What, Path, Reason string
}

func (e *Error) Error() string { return e.What + " " + e.Path + " ignored: " + e.Reason }

// Unwrap makes errors.Is(err, ErrUntrusted) hold.
func (e *Error) Unwrap() error { return ErrUntrusted }

// Rule is what a file must be to be trusted, besides a regular file (never a link) owned by
// root or by this process's user.
type Rule struct {
	// What names the kind of file in messages: "health file", "CDI spec".
	What string
	// Mode is the one permission the file may have (0600: the discovery cache and the health
	// file are their owner's alone). Zero accepts any permission that lets no one but the
	// owner write (0644: CDI specs, which engines and users read too).
	Mode fs.FileMode
	// Max is the largest size accepted, in bytes.
	Max int64
}

// Open opens path as an O_PATH handle, without following a symbolic link at path, and checks
// r on that handle. The handle cannot be read from: open its FDPath, which reaches the same
// inode (a reader that takes a path, such as the CDI library, can be given it). A
// missing file is an error wrapping fs.ErrNotExist; a file that does not pass r, an *Error.
func Open(path string, r Rule) (*os.File, error) {
	h, st, err := open(path, false)
	if err != nil {
		return nil, err
	}
	if err := check(st, path, r); err != nil {
		_ = h.Close()
		return nil, err
	}
	return h, nil
}

// open opens path as an O_PATH handle, following a symbolic link at path only with follow,
// and stats it.
func open(path string, follow bool) (*os.File, *unix.Stat_t, error) {
	flags := unix.O_PATH | unix.O_CLOEXEC
	if !follow {
		flags |= unix.O_NOFOLLOW
	}
	fd, err := unix.Open(path, flags, 0)
	if err != nil {
		return nil, nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	h := os.NewFile(uintptr(fd), path)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		_ = h.Close()
		return nil, nil, &fs.PathError{Op: "stat", Path: path, Err: err}
	}
	return h, &st, nil
}

// check checks r on st, the stat of path.
func check(st *unix.Stat_t, path string, r Rule) error {
	untrusted := func(format string, args ...any) error {
		return &Error{What: r.What, Path: path, Reason: fmt.Sprintf(format, args...)}
	}
	perm := fs.FileMode(st.Mode) & fs.ModePerm
	euid := os.Geteuid()
	switch {
	case st.Mode&unix.S_IFMT == unix.S_IFLNK:
		return untrusted("it is a symbolic link")
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return untrusted("not a regular file")
	case st.Uid != 0 && int64(st.Uid) != int64(euid):
		if euid == 0 {
			return untrusted("owned by uid %d, not 0", st.Uid)
		}
		return untrusted("owned by uid %d, neither 0 nor %d", st.Uid, euid)
	case r.Mode != 0 && perm != r.Mode:
		return untrusted("mode %04o, not %04o", perm, r.Mode)
	case r.Mode == 0 && perm&0o022 != 0:
		return untrusted("mode %04o, writable by its group or others", perm)
	case st.Size > r.Max:
		return untrusted("%d bytes, more than %d", st.Size, r.Max)
	}
	return nil
}

// FDPath is the /proc/self/fd path of h: opening it opens h's inode.
func FDPath(h *os.File) string { return "/proc/self/fd/" + strconv.Itoa(int(h.Fd())) }

// Read reads the file at path if it passes r: Open, then the handle's inode opened for reading
// without blocking, and at most r.Max bytes (a file that grew past it since the check is
// refused too).
func Read(path string, r Rule) ([]byte, error) {
	h, err := Open(path, r)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	data, err := read(h, r.Max)
	switch {
	case err != nil:
		return nil, fmt.Errorf("read %s %s: %w", r.What, path, err)
	case int64(len(data)) > r.Max:
		return nil, &Error{What: r.What, Path: path, Reason: fmt.Sprintf("more than %d bytes", r.Max)}
	}
	return data, nil
}

// NotRegularError says that a file ReadRegular would read is not a regular file (Kind says
// what it is: "FIFO", "directory"…) or is larger than Max bytes (Kind is empty).
type NotRegularError struct {
	Path, Kind string
	Size, Max  int64
}

func (e *NotRegularError) Error() string {
	if e.Kind == "" {
		return fmt.Sprintf("%s is %d bytes, more than the %d allowed", e.Path, e.Size, e.Max)
	}
	return fmt.Sprintf("%s is a %s, not a regular file", e.Path, e.Kind)
}

// kinds name the types of file in messages.
var kinds = map[uint32]string{
	unix.S_IFDIR:  "directory",
	unix.S_IFLNK:  "symbolic link",
	unix.S_IFIFO:  "FIFO",
	unix.S_IFSOCK: "socket",
	unix.S_IFCHR:  "character device",
	unix.S_IFBLK:  "block device",
}

// ReadRegular reads path, a regular file of at most limit bytes, whoever owns it, and returns
// its content (never nil) and permission bits; a symbolic link at path is followed only with
// follow. Like Read, it checks an O_PATH handle, then reads that handle reopened without
// blocking: a FIFO (whose open blocks), a device or a socket is never opened for reading, and
// a file swapped in after the check is not what is read. An error wraps fs.ErrNotExist, or is
// a *NotRegularError for anything but a regular file of at most limit bytes.
func ReadRegular(path string, limit int64, follow bool) ([]byte, fs.FileMode, error) {
	h, st, err := open(path, follow)
	if err != nil {
		return nil, 0, err
	}
	defer h.Close()
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, 0, &NotRegularError{Path: path, Kind: cmp.Or(kinds[st.Mode&unix.S_IFMT], "special file")}
	}
	if st.Size > limit {
		return nil, 0, &NotRegularError{Path: path, Size: st.Size, Max: limit}
	}
	data, err := read(h, limit)
	switch {
	case err != nil:
		return nil, 0, fmt.Errorf("read %s: %w", path, err)
	case int64(len(data)) > limit: // it grew after the check
		return nil, 0, &NotRegularError{Path: path, Size: int64(len(data)), Max: limit}
	}
	return data, fs.FileMode(st.Mode) & fs.ModePerm, nil
}

// read reads up to limit+1 bytes of h, an O_PATH handle, reopened for reading without blocking
// through its FDPath. The files read here are the host's, read in the host's /proc, so
// pathrs.Reopen's guard against a /proc someone else mounted buys nothing; and it would make a
// private procfs instance (fsopen, fsmount) in every process, gpu-runtime's start and delete
// included: ~0.15 ms each. internal/confined, which acts in container roots, keeps it.
func read(h *os.File, limit int64) ([]byte, error) {
	f, err := os.OpenFile(FDPath(h), os.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, limit+1))
}
