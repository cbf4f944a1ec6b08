// Package atomicfile replaces files atomically: readers see the old content or the new,
// never a mix, and a writer killed at any point leaves the old file in place. It is the one
// writer of every file gpu-runtime and gpu-ctk change on the host (a bundle's config.json,
// the discovery cache, engine configuration files, generated CDI specs: Write) and of the
// files gpu-runtime and gpu-hook write into a container root (its loader cache: WriteAt).
package atomicfile

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Options say how the file being replaced is treated.
type Options struct {
	// Follow: when path is a symlink, the file it points to is replaced (in its own
	// directory), so the link stays. Otherwise the rename replaces whatever is at path.
	Follow bool
	// KeepOwner: the new file gets the owner and group of the file it replaces. A new file
	// belongs to the writer.
	KeepOwner bool
}

// staleAge is how old a temporary file of our naming must be to be removed even though its
// writer's pid is alive (the pid may have been reused): a write takes milliseconds.
const staleAge = time.Minute

// tmpInfix separates a file's name from the suffix of its temporary files:
// .<name>.tmp-<pid>-<16 random hex digits>.
const tmpInfix = ".tmp-"

// tmpName returns a new name for a temporary file of the file name base. Its random part
// keeps any two writers apart: goroutines of one process, two processes, two containers'
// creates writing into one shared root. Creating it with O_EXCL|O_NOFOLLOW still decides.
// math/rand/v2's generator is seeded from the kernel's randomness in each process: names no
// other writer can predict, without linking crypto into gpu-runtime.
func tmpName(base string) string {
	return fmt.Sprintf(".%s%s%d-%016x", base, tmpInfix, os.Getpid(), rand.Uint64()) //nolint:gosec // unpredictable enough: O_EXCL decides
}

// createAttempts is how many temporary names a writer tries; with random names only a
// file planted at every one of them makes it fail.
const createAttempts = 10

// Write replaces path with data: a temporary file in the same directory is written, synced,
// given perm (and, with KeepOwner, the replaced file's owner and group) and renamed over
// path, then the directory is synced. On error the original is untouched and the
// temporary file removed. What killed writers left behind goes first (RemoveStale).
func Write(path string, data []byte, perm fs.FileMode, o Options) (err error) {
	target := filepath.Clean(path)
	if o.Follow {
		if target, err = resolve(target); err != nil {
			return err
		}
	}
	var owner *syscall.Stat_t
	if o.KeepOwner {
		var st syscall.Stat_t
		switch err := syscall.Stat(target, &st); {
		case err == nil:
			owner = &st
		case !errors.Is(err, fs.ErrNotExist):
			return fmt.Errorf("stat %s: %w", target, err)
		}
	}
	dir, base := filepath.Dir(target), filepath.Base(target)
	RemoveStale(dir, base)

	var f *os.File
	for range createAttempts {
		f, err = os.OpenFile(filepath.Join(dir, tmpName(base)), os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if !errors.Is(err, fs.ErrExist) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("create temporary file for %s: %w", target, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(tmp)
		}
	}()
	if _, err = f.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	if err = f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", tmp, err)
	}
	if owner != nil {
		if err = f.Chown(int(owner.Uid), int(owner.Gid)); err != nil {
			return fmt.Errorf("chown %s: %w", tmp, err)
		}
	}
	// After chown, which clears set-id bits.
	if err = f.Chmod(perm); err != nil {
		return fmt.Errorf("chmod %s: %w", tmp, err)
	}
	if err = f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", tmp, err)
	}
	if err = os.Rename(tmp, target); err != nil {
		return fmt.Errorf("replace %s: %w", target, err)
	}
	if d, derr := os.Open(dir); derr == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return nil
}

// resolve follows a symlink at path to the file it names (which need not exist yet).
func resolve(path string) (string, error) {
	for links := 0; ; links++ {
		fi, err := os.Lstat(path)
		if errors.Is(err, fs.ErrNotExist) || (err == nil && fi.Mode()&fs.ModeSymlink == 0) {
			return path, nil
		}
		if err != nil {
			return "", fmt.Errorf("stat %s: %w", path, err)
		}
		if links == 40 { // as the kernel's limit on links in a path
			return "", fmt.Errorf("resolve %s: too many levels of symbolic links", path)
		}
		link, err := os.Readlink(path)
		if err != nil {
			return "", fmt.Errorf("resolve %s: %w", path, err)
		}
		if !filepath.IsAbs(link) {
			dir, err := filepath.EvalSymlinks(filepath.Dir(path))
			if err != nil {
				return "", fmt.Errorf("resolve %s: %w", path, err)
			}
			link = filepath.Join(dir, link)
		}
		dir, err := filepath.EvalSymlinks(filepath.Dir(link))
		if err != nil {
			return "", fmt.Errorf("resolve %s: %w", path, err)
		}
		path = filepath.Join(dir, filepath.Base(link))
	}
}

// RemoveStale removes, from dir, temporary files of Write's naming for the file name base
// whose writer is gone (no process has the pid in their name) or that are older than a
// minute. Errors are ignored: a leftover costs disk space, never correctness.
func RemoveStale(dir, base string) {
	d, err := os.Open(dir)
	if err != nil {
		return
	}
	names, _ := d.Readdirnames(-1)
	_ = d.Close()
	prefix := "." + base + tmpInfix
	for _, name := range names {
		rest, ok := strings.CutPrefix(name, prefix)
		if !ok {
			continue
		}
		p := filepath.Join(dir, name)
		fi, err := os.Lstat(p)
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		pidText, _, _ := strings.Cut(rest, "-")
		if pid, err := strconv.Atoi(pidText); err == nil && pid > 0 && time.Since(fi.ModTime()) < staleAge {
			if err := unix.Kill(pid, 0); err == nil || errors.Is(err, unix.EPERM) {
				continue // being written: its writer is alive
			}
		}
		_ = os.Remove(p)
	}
}

// WriteAt replaces name in the directory dir (a handle resolved inside a container root;
// O_PATH will do) with data, as ldconfig replaces its cache and as Write does, but never
// through a link the image planted: the temporary file is created O_EXCL|O_NOFOLLOW, and the
// rename replaces a link at name rather than following it. Concurrent writes (two creates on
// one shared root) leave one of them whole; leftovers go by age (removeStaleAt). Unlike Write
// it keeps no owner and does not sync the directory: a container's root lives as long as the
// container, and the create path pays for every sync.
func WriteAt(dir *os.File, name string, data []byte, perm fs.FileMode) error {
	dfd := int(dir.Fd())
	removeStaleAt(dfd, name, time.Now())
	var (
		fd  int
		tmp string
		err error
	)
	for range createAttempts {
		tmp = tmpName(name)
		fd, err = unix.Openat(dfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if !errors.Is(err, unix.EEXIST) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("create %s: %w", tmp, err)
	}
	f := os.NewFile(uintptr(fd), tmp)
	_, werr := f.Write(data)
	cerr := f.Chmod(perm)
	serr := f.Sync()
	if err := errors.Join(werr, cerr, serr, f.Close()); err != nil {
		_ = unix.Unlinkat(dfd, tmp, 0)
		return err
	}
	if err := unix.Renameat(dfd, tmp, dfd, name); err != nil {
		_ = unix.Unlinkat(dfd, tmp, 0)
		return fmt.Errorf("rename %s to %s: %w", tmp, name, err)
	}
	return nil
}

// maxStaleScan bounds how many entries of a container directory removeStaleAt reads: an image
// chooses the size of its /etc, and a create must not list a million names. A real /etc holds
// a few hundred.
const maxStaleScan = 4096

// removeStaleAt removes, from the directory dfd, regular files of tmpName's naming for name
// that are at least staleAge old: what a killed WriteAt left there. Unlike RemoveStale it does
// not judge by pid: the writers of one container root (gpu-runtime at create, gpu-hook in the
// container's PID namespace, another container's create) see each other's pids in different
// namespaces, so a live writer's file could look abandoned. Errors are ignored.
func removeStaleAt(dfd int, name string, now time.Time) {
	fd, err := unix.Openat(dfd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	d := os.NewFile(uintptr(fd), ".")
	defer d.Close()
	prefix := "." + name + tmpInfix
	for read := 0; read < maxStaleScan; {
		names, err := d.Readdirnames(min(256, maxStaleScan-read))
		read += len(names)
		for _, n := range names {
			if !strings.HasPrefix(n, prefix) {
				continue
			}
			var st unix.Stat_t
			if unix.Fstatat(dfd, n, &st, unix.AT_SYMLINK_NOFOLLOW) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
				continue
			}
			if now.Sub(time.Unix(st.Mtim.Unix())) >= staleAge {
				_ = unix.Unlinkat(dfd, n, 0)
			}
		}
		if err != nil || len(names) == 0 {
			return // io.EOF: the whole directory was read
		}
	}
}
