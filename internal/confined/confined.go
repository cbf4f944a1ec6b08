// Package confined reads and writes inside a container root on behalf of a root process,
// which must treat everything there as the image's: every path is resolved inside the root
// (pathrs-lite: openat2 RESOLVE_IN_ROOT without magic links, or its safe emulation), on one
// handle of the root opened once per update; what is resolved must lie on the root's own
// mount — a volume, a bind mount or a kernel filesystem mounted inside the root is never read
// as image configuration nor written (ErrOtherMount); only regular files are read, checked
// on an O_PATH handle first and then opened without blocking; links are made and files
// replaced relative to directory handles, never through a path string; and every call
// spends one budget (bytes read, directory entries listed, paths resolved, a deadline), so
// that no image can make an update use unbounded memory or time (ErrBudget). Image files
// can be read with the container user's file-system credentials (Root.ReadAs), so that a
// file the container's user could not read is not read for it either.
package confined

import (
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	pathrs "github.com/cyphar/filepath-securejoin/pathrs-lite"
	"golang.org/x/sys/unix"

	"github.com/gpu-runtime/gpu-runtime/internal/atomicfile"
)

// ErrNotRegular: a path that must be a regular file (to be read) is something else: a FIFO,
// a device, a directory, a link. Such files are never opened for reading: opening a FIFO
// blocks, reading a device may never end.
var ErrNotRegular = errors.New("not a regular file")

// ErrOtherMount: a path resolves to something on another mount than the container root —
// a volume, a bind mount, /proc. A root process acting there would act on the host's data
// (or the kernel's) with the host's privileges, whatever the container's user may do.
var ErrOtherMount = errors.New("on another mount than the container root")

// ErrBudget: the work would read, list or resolve more than the update's Limits allow, or
// run past its deadline.
var ErrBudget = errors.New("over the limit for one container")

// Limits bound everything one update does inside a root, all calls together.
type Limits struct {
	// Deadline, when not zero, ends the update: a call after it fails.
	Deadline time.Time
	// Bytes is how many bytes may be read from files in the root.
	Bytes int64
	// Entries is how many directory entries may be listed.
	Entries int
	// Lookups is how many paths may be resolved.
	Lookups int
}

// DefaultLimits are the limits of one loader-cache update, ending after timeout (none when
// zero). A real image's update reads its cache (about 100 KiB), a few small configuration
// files and the injected libraries' headers, lists at most a few thousand names and resolves
// a few dozen paths: the limits are two orders of magnitude above that, and far below what
// would cost a create noticeable memory or time.
func DefaultLimits(timeout time.Duration) Limits {
	l := Limits{Bytes: 16 << 20, Entries: 64 << 10, Lookups: 16 << 10}
	if timeout > 0 {
		l.Deadline = time.Now().Add(timeout)
	}
	return l
}

// BudgetError says which limit an update reached, and where.
type BudgetError struct {
	// Path is the container path being read, listed or resolved.
	Path string
	// Limit says which limit, in words ("16777216 bytes read").
	Limit string
}

func (e *BudgetError) Error() string {
	return fmt.Sprintf("%s: reached the limit of %s for one container's update", e.Path, e.Limit)
}

func (e *BudgetError) Unwrap() error { return ErrBudget }

// MountError says which path lies on another mount.
type MountError struct{ Path string }

func (e *MountError) Error() string {
	return e.Path + " is on another mount than the container root (a volume, a bind mount or a kernel file system): gpu-runtime does not act there"
}

func (e *MountError) Unwrap() error { return ErrOtherMount }

// budget is what is left of an update's Limits.
type budget struct{ left, lim Limits }

// check says whether the deadline has passed; lookup, read and list spend what they say
// for p, or say which limit it would exceed.
func (b *budget) check(p string) error {
	if !b.lim.Deadline.IsZero() && time.Now().After(b.lim.Deadline) {
		return &BudgetError{Path: p, Limit: "time"}
	}
	return nil
}

func (b *budget) lookup(p string) error {
	if err := b.check(p); err != nil {
		return err
	}
	if b.left.Lookups <= 0 {
		return &BudgetError{Path: p, Limit: strconv.Itoa(b.lim.Lookups) + " paths resolved"}
	}
	b.left.Lookups--
	return nil
}

func (b *budget) read(p string, n int64) error {
	if n > b.left.Bytes {
		return &BudgetError{Path: p, Limit: strconv.FormatInt(b.lim.Bytes, 10) + " bytes read"}
	}
	b.left.Bytes -= n
	return nil
}

func (b *budget) list(p string, n int) error {
	if n > b.left.Entries {
		return &BudgetError{Path: p, Limit: strconv.Itoa(b.lim.Entries) + " directory entries listed"}
	}
	b.left.Entries -= n
	return nil
}

// Root is a container root opened for one update. It is not safe for concurrent use: one
// goroutine does the update.
type Root struct {
	path string
	h    *os.File // O_PATH, O_DIRECTORY
	mnt  uint64   // the mount id of the root
	b    *budget
	cred *Cred
	dirs map[string]*Dir
	dry  bool
}

// Open opens the container root at path (a host path, trusted) for an update bounded by lim.
func Open(root string, lim Limits) (*Root, error) {
	h, err := os.OpenFile(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open container root %s: %w", root, err)
	}
	mnt, err := mountID(h)
	if err != nil {
		_ = h.Close()
		return nil, fmt.Errorf("open container root %s: %w", root, err)
	}
	return &Root{path: root, h: h, mnt: mnt, b: &budget{left: lim, lim: lim}, dirs: map[string]*Dir{}}, nil
}

// Path is the root's host path.
func (r *Root) Path() string { return r.path }

// Deadline is the update's deadline (zero for none).
func (r *Root) Deadline() time.Time { return r.b.lim.Deadline }

// Close closes the root and every directory handle it gave out (O_PATH handles: nothing to
// report).
func (r *Root) Close() {
	for _, d := range r.dirs {
		if d.h != nil {
			_ = d.h.Close()
		}
	}
	r.dirs = nil
	_ = r.h.Close()
}

// DryRun makes the root read-only for the rest of the update: writes (Dir.Symlink,
// Dir.WriteFile) are skipped, and MkdirAll of a directory that does not exist (after the same
// checks) gives an empty directory that is not there — what the update would find after
// making it. gpu-ctk explain runs a create's update this way, to say what it would do.
func (r *Root) DryRun() { r.dry = true }

// ReadAs makes every later read of an image file (ReadFile, List, Dir.Open, Dir.Readlink,
// and resolving their paths) use c's file-system credentials; nil reads as the caller.
// Writes (Dir.Symlink, Dir.WriteFile, MkdirAll) stay the caller's: the container's loader
// cache belongs to its root.
func (r *Root) ReadAs(c *Cred) { r.cred = c }

// resolve returns an O_PATH handle on p resolved inside the root, checked to be on the
// root's mount unless anyMount.
func (r *Root) resolve(p string, anyMount bool) (*os.File, error) {
	if err := r.b.lookup(p); err != nil {
		return nil, err
	}
	h, err := pathrs.OpenatInRoot(r.h, p)
	if err != nil {
		return nil, err
	}
	if !anyMount {
		if err := r.sameMount(h, p); err != nil {
			_ = h.Close()
			return nil, err
		}
	}
	return h, nil
}

// sameMount checks that h (resolved from p) is on the root's mount.
func (r *Root) sameMount(h *os.File, p string) error {
	id, err := mountID(h)
	if err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	if id != r.mnt {
		return &MountError{Path: p}
	}
	return nil
}

// Lookup resolves p inside the root and returns an O_PATH handle on it, wherever it is
// mounted: for callers that act on a mount on purpose (covering the container's procfs).
func (r *Root) Lookup(p string) (*os.File, error) {
	var h *os.File
	err := r.asReader(func() (err error) {
		h, err = r.resolve(p, true)
		return err
	})
	return h, err
}

// Dir returns a handle on the directory p inside the root, opened once; it must be a
// directory on the root's mount.
func (r *Root) Dir(p string) (*Dir, error) {
	p = path.Clean("/" + p)
	if d, ok := r.dirs[p]; ok {
		return d, nil
	}
	var h *os.File
	err := r.asReader(func() (err error) {
		h, err = r.resolve(p, false)
		return err
	})
	if err != nil {
		return nil, err
	}
	if err := isDir(h, p); err != nil {
		_ = h.Close()
		return nil, err
	}
	d := &Dir{r: r, path: p, h: h}
	r.dirs[p] = d
	return d, nil
}

// MkdirAll makes the directory p and its parents inside the root (mode perm), as the
// low-level runtime would make a mount's target, and returns its handle. What exists of p
// must be on the root's mount before anything is made: a link into a volume makes nothing
// there.
func (r *Root) MkdirAll(p string, perm os.FileMode) (*Dir, error) {
	p = path.Clean("/" + p)
	d, err := r.Dir(p)
	if !errors.Is(err, fs.ErrNotExist) {
		return d, err
	}
	// The deepest existing ancestor must be ours; pathrs-lite then makes the rest below it
	// without following anything out of the root.
	for a := path.Dir(p); ; a = path.Dir(a) {
		_, err := r.Dir(a)
		if err == nil {
			break
		}
		if !errors.Is(err, fs.ErrNotExist) || a == "/" {
			return nil, err
		}
	}
	if err := r.b.lookup(p); err != nil {
		return nil, err
	}
	d = &Dir{r: r, path: p} // in a dry run, not made: empty, and nothing written to it
	if !r.dry {
		h, err := pathrs.MkdirAllHandle(r.h, p, perm)
		if err != nil {
			return nil, fmt.Errorf("create %s in container root %s: %w", p, r.path, err)
		}
		if err := r.sameMount(h, p); err != nil {
			_ = h.Close()
			return nil, err
		}
		d.h = h
	}
	r.dirs[p] = d
	return d, nil
}

// ReadFile reads the regular file p inside the root, at most limit bytes (a larger file is
// an error before anything is read), spending the budget's bytes.
func (r *Root) ReadFile(p string, limit int64) ([]byte, error) {
	var data []byte
	err := r.asReader(func() error {
		h, err := r.resolve(p, false)
		if err != nil {
			return err
		}
		defer h.Close()
		data, err = r.readRegular(h, p, limit)
		return err
	})
	return data, err
}

// List lists the directory p inside the root, sorted; more than limit entries is an error.
func (r *Root) List(p string, limit int) ([]string, error) {
	d, err := r.Dir(p)
	if err != nil {
		return nil, err
	}
	return d.List(limit)
}

// readRegular reads the regular file behind the O_PATH handle h (named p) without
// blocking, at most limit bytes.
func (r *Root) readRegular(h *os.File, p string, limit int64) ([]byte, error) {
	size, err := regularSize(h)
	if err != nil {
		return nil, err
	}
	if size > limit {
		return nil, fmt.Errorf("larger than %d bytes", limit)
	}
	if err := r.b.read(p, size); err != nil {
		return nil, err
	}
	f, err := pathrs.Reopen(h, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	// Sized from the stat: one allocation. A file that grew since is cut at its size and
	// refused.
	buf := make([]byte, size+1)
	n, err := io.ReadFull(f, buf)
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF):
		return buf[:n], nil
	case err != nil:
		return nil, err
	}
	return nil, fmt.Errorf("larger than the %d bytes it had when opened", size)
}

// Dir is a directory inside the root, on the root's mount.
type Dir struct {
	r    *Root
	path string
	h    *os.File // O_PATH; nil for a directory a dry run would have made (empty)
}

// ID is the directory's device and inode: in a usr-merged image /lib/x and /usr/lib/x are
// one directory.
func (d *Dir) ID() (FileID, error) {
	if d.h == nil {
		return FileID{Dev: ^uint64(0), Ino: uint64(len(d.path))<<32 | uint64(crc32.ChecksumIEEE([]byte(d.path)))}, nil
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(d.h.Fd()), &st); err != nil {
		return FileID{}, fmt.Errorf("stat %s: %w", d.path, err)
	}
	return FileID{Dev: st.Dev, Ino: st.Ino}, nil
}

// FileID names a directory by device and inode.
type FileID struct{ Dev, Ino uint64 }

// List lists the directory, sorted, spending the budget's entries; more than limit entries
// is an error. The entries read are spent whether or not the listing is refused, and the
// deadline is checked first: a directory handle comes from the root's cache without a
// lookup, so a caller listing it again and again would otherwise pay nothing.
func (d *Dir) List(limit int) ([]string, error) {
	if err := d.r.b.check(d.path); err != nil {
		return nil, err
	}
	if d.h == nil {
		return nil, nil
	}
	var names []string
	err := d.r.asReader(func() error {
		f, err := pathrs.Reopen(d.h, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC)
		if err != nil {
			return err
		}
		defer f.Close()
		want := min(limit, d.r.b.left.Entries) + 1
		names, err = f.Readdirnames(want)
		if err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		if err := d.r.b.list(d.path, len(names)); err != nil {
			return err
		}
		if len(names) > limit {
			return fmt.Errorf("more than %d entries", limit)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.Sort(names)
	return names, nil
}

// Open opens the regular file name in the directory for reading — never following a link,
// never blocking — and returns it with its size. It must be on the root's mount unless
// anyMount (a file the low-level runtime mounted there on purpose).
func (d *Dir) Open(name string, anyMount bool) (*os.File, int64, error) {
	if !validName(name) {
		return nil, 0, fmt.Errorf("%q is not a file name", name)
	}
	if d.h == nil {
		return nil, 0, &fs.PathError{Op: "open", Path: path.Join(d.path, name), Err: fs.ErrNotExist}
	}
	var f *os.File
	var size int64
	err := d.r.asReader(func() error {
		fd, err := unix.Openat(int(d.h.Fd()), name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return &fs.PathError{Op: "open", Path: path.Join(d.path, name), Err: err}
		}
		h := os.NewFile(uintptr(fd), name)
		defer h.Close()
		if size, err = regularSize(h); err != nil {
			return err
		}
		if !anyMount {
			if err := d.r.sameMount(h, path.Join(d.path, name)); err != nil {
				return err
			}
		}
		f, err = pathrs.Reopen(h, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC)
		return err
	})
	return f, size, err
}

// ErrNotLink: Readlink found something that is not a symbolic link.
var ErrNotLink = errors.New("not a symbolic link")

// maxLink bounds a link's target (PATH_MAX).
const maxLink = 4096

// Readlink returns the target of the symbolic link name in the directory: an error wrapping
// fs.ErrNotExist when nothing is there, ErrNotLink when it is not a link.
func (d *Dir) Readlink(name string) (string, error) {
	if !validName(name) {
		return "", fmt.Errorf("%q is not a file name", name)
	}
	if d.h == nil {
		return "", fs.ErrNotExist
	}
	var target string
	err := d.r.asReader(func() error {
		buf := make([]byte, maxLink)
		n, err := unix.Readlinkat(int(d.h.Fd()), name, buf)
		switch {
		case errors.Is(err, unix.ENOENT):
			return fs.ErrNotExist
		case errors.Is(err, unix.EINVAL):
			return ErrNotLink
		case err != nil:
			return err
		case n == len(buf):
			return fmt.Errorf("link %s: target longer than %d bytes", path.Join(d.path, name), maxLink-1)
		}
		target = string(buf[:n])
		return nil
	})
	return target, err
}

// Exists says whether something (of any kind) is at name in the directory.
func (d *Dir) Exists(name string) (bool, error) {
	if d.h == nil {
		return false, nil
	}
	var st unix.Stat_t
	err := unix.Fstatat(int(d.h.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, unix.ENOENT):
		return false, nil
	}
	return false, fmt.Errorf("stat %s: %w", path.Join(d.path, name), err)
}

// Symlink makes the link name -> target in the directory (symlinkat on its handle). A link
// already there is accepted only when it is the same link.
func (d *Dir) Symlink(target, name string) error {
	if !validName(name) {
		return fmt.Errorf("%q is not a file name", name)
	}
	if d.r.dry {
		return nil
	}
	err := unix.Symlinkat(target, int(d.h.Fd()), name)
	if errors.Is(err, unix.EEXIST) {
		if have, lerr := d.Readlink(name); lerr == nil && have == target {
			return nil
		}
	}
	if err != nil {
		return fmt.Errorf("create link %s -> %s: %w", path.Join(d.path, name), target, err)
	}
	return nil
}

// WriteFile replaces name in the directory with data (mode perm), atomically, never through
// a link: atomicfile.WriteAt on the directory's handle.
func (d *Dir) WriteFile(name string, data []byte, perm fs.FileMode) error {
	if !validName(name) {
		return fmt.Errorf("%q is not a file name", name)
	}
	if err := d.r.b.check(path.Join(d.path, name)); err != nil || d.r.dry {
		return err
	}
	if err := atomicfile.WriteAt(d.h, name, data, perm); err != nil {
		return fmt.Errorf("write %s in the container root: %w", path.Join(d.path, name), err)
	}
	return nil
}

// validName says whether name is one directory entry's name.
func validName(name string) bool {
	return name != "" && name != "." && name != ".." && !strings.ContainsAny(name, "/\x00")
}

// regularSize returns the size of the regular file behind h, or ErrNotRegular.
func regularSize(h *os.File) (int64, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(h.Fd()), &st); err != nil {
		return 0, fmt.Errorf("stat: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return 0, ErrNotRegular
	}
	return st.Size, nil
}

// isDir checks that h (resolved from p) is a directory.
func isDir(h *os.File, p string) error {
	var st unix.Stat_t
	if err := unix.Fstat(int(h.Fd()), &st); err != nil {
		return fmt.Errorf("stat %s: %w", p, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return &fs.PathError{Op: "open", Path: p, Err: unix.ENOTDIR}
	}
	return nil
}
