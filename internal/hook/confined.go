package hook

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"

	securejoin "github.com/cyphar/filepath-securejoin"
	"golang.org/x/sys/unix"
)

// errNotRegular: an image path the hook would read is not a regular file (a FIFO, a device,
// a directory). Such files are skipped, never opened for reading: opening a FIFO blocks.
var errNotRegular = errors.New("not a regular file")

// readRegular reads the file at unsafePath inside the directory handle dir (a path that
// may hold image symlinks, resolved inside the root), at most limit bytes. It first checks,
// on an O_PATH handle, that the file is a regular file, then opens it without blocking, so
// a FIFO or device planted by the image can neither hang nor feed the hook; a file larger
// than limit is refused before it is read.
func readRegular(dir *os.File, unsafePath string, limit int64) ([]byte, error) {
	h, err := securejoin.OpenatInRoot(dir, unsafePath)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(h.Fd()), &st); err != nil {
		return nil, fmt.Errorf("stat: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, errNotRegular
	}
	if st.Size > limit {
		return nil, fmt.Errorf("larger than %d bytes", limit)
	}
	f, err := securejoin.Reopen(h, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	// Sized from the stat: one allocation, no regrowth (a real cache is ~100 KiB).
	buf := bytes.NewBuffer(make([]byte, 0, st.Size+bytes.MinRead))
	if _, err := buf.ReadFrom(io.LimitReader(f, limit+1)); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("larger than %d bytes", limit)
	}
	return data, nil
}

// openRoot opens the container root as a directory handle for the confined lookups.
func openRoot(root string) (*os.File, error) {
	f, err := os.OpenFile(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open container root %s: %w", root, err)
	}
	return f, nil
}
