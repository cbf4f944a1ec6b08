package confined

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// mountID returns the id of the mount h is on. statx reports it since Linux 5.8; older
// kernels (RHEL 8's 4.18) list it in the handle's /proc/self/fdinfo entry (since 3.15).
// pathrs-lite cannot be asked to stay on one mount (RESOLVE_NO_XDEV), so the result of each
// lookup is checked instead: what is acted on must be on the root's mount, whatever was
// passed through on the way.
func mountID(h *os.File) (uint64, error) {
	var stx unix.Statx_t
	err := unix.Statx(int(h.Fd()), "", unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW, unix.STATX_MNT_ID, &stx)
	if err == nil && stx.Mask&unix.STATX_MNT_ID != 0 {
		return stx.Mnt_id, nil
	}
	return fdinfoMountID(h)
}

// fdinfoMountID reads the mnt_id line of h's fdinfo.
func fdinfoMountID(h *os.File) (uint64, error) {
	data, err := os.ReadFile("/proc/self/fdinfo/" + strconv.Itoa(int(h.Fd())))
	if err != nil {
		return 0, fmt.Errorf("find the mount of a handle: %w", err)
	}
	for _, line := range bytes.Split(data, []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, []byte("mnt_id:")); ok {
			return strconv.ParseUint(string(bytes.TrimSpace(v)), 10, 64)
		}
	}
	return 0, errors.New("find the mount of a handle: no mnt_id in its fdinfo")
}
