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
package trustedfile

import (
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
	fd, err := unix.Open(path, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	if err := check(f, path, r); err != nil {
		_ = f.Close()
		return nil, err
	}
	return f, nil
}

// check checks r on f, a handle of path.
func check(f *os.File, path string, r Rule) error {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return fmt.Errorf("stat %s %s: %w", r.What, path, err)
	}
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
	f, err := os.OpenFile(FDPath(h), os.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, fmt.Errorf("read %s: %w", r.What, &fs.PathError{Op: "open", Path: path, Err: err})
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, r.Max+1))
	if err != nil {
		return nil, fmt.Errorf("read %s %s: %w", r.What, path, err)
	}
	if int64(len(data)) > r.Max {
		return nil, &Error{What: r.What, Path: path, Reason: fmt.Sprintf("more than %d bytes", r.Max)}
	}
	return data, nil
}
