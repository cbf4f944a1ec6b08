// Package ldcache reads and writes glibc's dynamic linker cache (/etc/ld.so.cache).
//
// Load lists the libraries a cache records. ParseCache reads a cache into a Cache,
// which keeps everything the loader uses (each entry's flags, key, path, OS version and hwcap
// in file order, and the glibc-hwcaps subdirectory names); Add puts libraries in where
// ldconfig would, and Encode lays the cache out byte for byte as glibc 2.36's ldconfig does. A
// container's cache can so be extended without running ldconfig: a cache ldconfig wrote comes
// back unchanged, and the loader finds in it what it would find in ldconfig's.
//
// Both formats ldconfig writes are read: "glibc-ld.so.cache1.1" (ldconfig -c new, the default
// since glibc 2.32 and what Debian 12 writes) and the historic "ld.so-1.7.0", alone (-c old)
// or followed by a new-format cache (-c compat). The layout follows glibc's
// sysdeps/generic/dl-cache.h (structures and flag values), elf/cache.c (the writer) and
// elf/dl-cache.c (the reader, _dl_load_cache_lookup).
//
// The cache may come from an untrusted root (a container image, a driver container), so
// parsing is read-only and bounds-checked: a malformed cache yields an error wrapping
// ErrFormat, never a panic, an out-of-range read or an allocation out of proportion to the
// input.
package ldcache

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"github.com/gpu-runtime/gpu-runtime/internal/trustedfile"
)

// DefaultPath is where glibc's dynamic linker looks for its cache.
const DefaultPath = "/etc/ld.so.cache"

// MaxSize is the largest cache read. Real caches are well under a megabyte; the limit stops a
// hostile root from making Load read without bound.
const MaxSize = 64 << 20

// ErrFormat is wrapped by every error about a cache that is truncated, malformed or in a
// format this package does not know.
var ErrFormat = errors.New("malformed ld.so.cache")

// Entry is one library in the cache.
type Entry struct {
	Name  string // the SONAME-style key, e.g. "libcuda.so.1"
	Path  string // path as recorded, e.g. "/usr/lib/x86_64-linux-gnu/libcuda.so.1"
	Flags int32  // raw flags (FLAG_* in glibc's sysdeps/generic/ldconfig.h)
	Bits  int    // 64 or 32, from the ABI recorded in Flags; 0 if unknown

	// OSVersion is the lowest kernel version the library declares it needs ((os << 24) |
	// (major << 16) | (minor << 8) | patch), 0 for none. glibc 2.36's ldconfig always writes
	// 0; older ones copied the library's ABI note. Always 0 in the old format.
	OSVersion uint32
	// Hwcap is the hardware capability word. With the HwcapExtension bit (and only ISA-level
	// bits besides it) in the upper half, the entry is in a glibc-hwcaps subdirectory and the
	// lower 32 bits index Cache.GlibcHwcaps; otherwise non-zero bits name the legacy hwcaps
	// subdirectory the library is in (for example bit 63 for "tls"). Always 0 in the old
	// format, which has no such field.
	Hwcap uint64
}

// Layout constants from sysdeps/generic/dl-cache.h.
const (
	// struct cache_file: char magic[11]; uint32 nlibs; struct file_entry libs[].
	oldMagic      = "ld.so-1.7.0"
	oldHeaderSize = 16
	oldEntrySize  = 12 // int32 flags; uint32 key, value

	// struct cache_file_new: char magic[17]; char version[3]; uint32 nlibs; uint32
	// len_strings; uint8 flags; uint8 pad[3]; uint32 extension_offset; uint32 unused[3];
	// struct file_entry_new libs[].
	newMagic      = "glibc-ld.so.cache1.1"
	newHeaderSize = 48
	newEntrySize  = 24 // int32 flags; uint32 key, value; uint32 osversion; uint64 hwcap

	// cache_file_new.flags values (enum cache_file_new_flags).
	endianUnset  = 0 // written by ldconfig before glibc 2.33: native order
	endianLittle = 2
	endianBig    = 3
)

// Load reads and parses the cache at path. A missing file is an error wrapping fs.ErrNotExist;
// one not regular or larger than MaxSize, wrapping ErrFormat. The file is read only when it
// is regular, checked before it is opened (trustedfile.ReadRegular): a FIFO planted at path
// is never opened, so Load does not block. Load follows symbolic links: to read a cache
// inside an untrusted root, open it safely and pass its contents to ParseCache.
func Load(path string) ([]Entry, error) {
	data, _, err := trustedfile.ReadRegular(path, MaxSize, true)
	var notRegular *trustedfile.NotRegularError
	switch {
	case errors.As(err, &notRegular) && notRegular.Kind == "":
		return nil, fmt.Errorf("read ld cache %q: %w: larger than %d bytes", path, ErrFormat, MaxSize)
	case errors.As(err, &notRegular):
		return nil, fmt.Errorf("read ld cache %q: %w: not a regular file (%s)", path, ErrFormat, notRegular.Kind)
	case err != nil:
		return nil, fmt.Errorf("open ld cache %q: %w", path, err)
	}
	entries, _, err := parse(data)
	if err != nil {
		return nil, fmt.Errorf("parse ld cache %q: %w", path, err)
	}
	return entries, nil
}

// newPart locates the new-format part of a cache file.
type newPart struct {
	off    uint64           // file offset of its header, where its string offsets count from
	order  binary.ByteOrder // byte order of its fields
	extOff uint32           // file offset of the extension directory; 0 for none
}

// parse returns the entries of an ld.so.cache file in file order, the order the loader
// searches them: those of the new-format part of a combined old+new cache, as glibc does. It
// says where that part is: nil for a cache in the old format alone. Errors wrap ErrFormat.
func parse(data []byte) ([]Entry, *newPart, error) {
	switch {
	case bytes.HasPrefix(data, []byte(newMagic)):
		return parseNew(data, 0)
	case bytes.HasPrefix(data, []byte(oldMagic)):
		return parseOld(data)
	default:
		return nil, nil, fmt.Errorf("%w: unknown magic %q", ErrFormat, data[:min(len(data), len(newMagic))])
	}
}

// parseOld parses a cache that starts with the old-format header. If a new-format cache
// follows the old entries, that part is parsed instead, as in glibc's _dl_load_cache_lookup.
func parseOld(data []byte) ([]Entry, *newPart, error) {
	if len(data) < oldHeaderSize {
		return nil, nil, fmt.Errorf("%w: old-format header truncated: %d bytes, want %d", ErrFormat, len(data), oldHeaderSize)
	}
	// The old format has no byte-order marker: ldconfig writes it in the native order. If the
	// new part follows, its marker decides.
	nlibs := uint64(binary.NativeEndian.Uint32(data[12:]))
	end := oldHeaderSize + nlibs*oldEntrySize
	if end > uint64(len(data)) {
		return nil, nil, fmt.Errorf("%w: %d old-format entries do not fit in %d bytes", ErrFormat, nlibs, len(data))
	}

	// The new header is aligned to __alignof__(struct cache_file_new): 8 where uint64_t is
	// 8-aligned, 4 on i386. The old entries end 4-aligned, so try the 8-aligned offset, then
	// the 4-aligned one.
	for _, off := range []uint64{(end + 7) &^ 7, end} {
		if off+uint64(len(newMagic)) <= uint64(len(data)) && bytes.HasPrefix(data[off:], []byte(newMagic)) {
			entries, np, err := parseNew(data[off:], off)
			if err != nil {
				return nil, nil, fmt.Errorf("new-format part at offset %d: %w", off, err)
			}
			return entries, np, nil
		}
	}

	// Old format alone: string offsets are relative to the end of the entries, and the string
	// table runs to the end of the file.
	entries, err := makeEntries(binary.NativeEndian, data[oldHeaderSize:], nlibs, oldEntrySize, string(data[end:]))
	return entries, nil, err
}

// parseNew parses a new-format cache starting at data[0], which is at offset off in the file.
// String offsets are relative to data[0].
func parseNew(data []byte, off uint64) ([]Entry, *newPart, error) {
	if len(data) < newHeaderSize {
		return nil, nil, fmt.Errorf("%w: header truncated: %d bytes, want %d", ErrFormat, len(data), newHeaderSize)
	}
	var order binary.ByteOrder
	switch data[28] {
	case endianUnset:
		order = binary.NativeEndian
	case endianLittle:
		order = binary.LittleEndian
	case endianBig:
		order = binary.BigEndian
	default:
		return nil, nil, fmt.Errorf("%w: invalid byte-order flag %d", ErrFormat, data[28])
	}
	nlibs := uint64(order.Uint32(data[20:]))
	if newHeaderSize+nlibs*newEntrySize > uint64(len(data)) {
		return nil, nil, fmt.Errorf("%w: %d entries do not fit in %d bytes", ErrFormat, nlibs, len(data))
	}
	// The entries' strings share one copy of data: converted once, not each allocated.
	var strs string
	if nlibs > 0 {
		strs = string(data)
	}
	entries, err := makeEntries(order, data[newHeaderSize:], nlibs, newEntrySize, strs)
	if err != nil {
		return nil, nil, err
	}
	return entries, &newPart{off: off, order: order, extOff: order.Uint32(data[32:])}, nil
}

// makeEntries decodes the n entries of size bytes (oldEntrySize or newEntrySize) at the start
// of table, resolving their string offsets in strs.
func makeEntries(order binary.ByteOrder, table []byte, n, size uint64, strs string) ([]Entry, error) {
	entries := make([]Entry, n)
	for i := range n {
		e := table[i*size:]
		flags := int32(order.Uint32(e[0:])) //nolint:gosec // G115: the field is C's int32_t flags, stored as its bits
		name, err := cString(strs, order.Uint32(e[4:]))
		if err != nil {
			return nil, fmt.Errorf("%w: entry %d: key: %w", ErrFormat, i, err)
		}
		path, err := cString(strs, order.Uint32(e[8:]))
		if err != nil {
			return nil, fmt.Errorf("%w: entry %d: value: %w", ErrFormat, i, err)
		}
		entries[i] = Entry{Name: name, Path: path, Flags: flags, Bits: bits(flags)}
		if size == newEntrySize {
			entries[i].OSVersion, entries[i].Hwcap = order.Uint32(e[12:]), order.Uint64(e[16:])
		}
	}
	return entries, nil
}

// cString returns the non-empty NUL-terminated string at strs[off:].
func cString(strs string, off uint32) (string, error) {
	if uint64(off) >= uint64(len(strs)) {
		return "", fmt.Errorf("string offset %d outside string table of %d bytes", off, len(strs))
	}
	s := strs[off:]
	n := strings.IndexByte(s, 0)
	switch {
	case n < 0:
		return "", fmt.Errorf("string at offset %d is not NUL-terminated", off)
	case n == 0:
		return "", fmt.Errorf("empty string at offset %d", off)
	}
	return s[:n], nil
}

// Flag values from glibc's sysdeps/generic/ldconfig.h. The low byte is the library type
// (FLAG_ELF, FLAG_ELF_LIBC6…), the next byte the ABI the library requires.
const (
	flagRequiredMask         = 0xff00
	flagSparcLib64           = 0x0100
	flagIA64Lib64            = 0x0200
	flagX8664Lib64           = 0x0300
	flagS390Lib64            = 0x0400
	flagPowerPCLib64         = 0x0500
	flagMIPS64LibN32         = 0x0600
	flagMIPS64LibN64         = 0x0700
	flagX8664LibX32          = 0x0800
	flagARMLibHF             = 0x0900
	flagAArch64Lib64         = 0x0a00
	flagARMLibSF             = 0x0b00
	flagMIPSLib32NaN2008     = 0x0c00
	flagMIPS64LibN32NaN2008  = 0x0d00
	flagMIPS64LibN64NaN2008  = 0x0e00
	flagRISCVFloatABISoft    = 0x0f00
	flagRISCVFloatABIDouble  = 0x1000
	flagLoongArchFloatSoft   = 0x1100
	flagLoongArchFloatDouble = 0x1200
)

// bits returns the word size of the ABI recorded in flags: 64 or 32, or 0 when the flags do
// not say. No required-ABI bits is the base ABI of every multilib architecture ldconfig
// distinguishes (i386, 32-bit SPARC, PowerPC, S/390 and MIPS o32), all 32-bit. RISC-V records
// only the float ABI, the same for RV32 and RV64, so its word size is unknown.
func bits(flags int32) int {
	switch flags & flagRequiredMask {
	case 0, flagX8664LibX32, flagMIPS64LibN32, flagMIPS64LibN32NaN2008,
		flagARMLibHF, flagARMLibSF, flagMIPSLib32NaN2008:
		return 32
	case flagSparcLib64, flagIA64Lib64, flagX8664Lib64, flagS390Lib64,
		flagPowerPCLib64, flagMIPS64LibN64, flagMIPS64LibN64NaN2008,
		flagAArch64Lib64, flagLoongArchFloatSoft, flagLoongArchFloatDouble:
		return 64
	default: // flagRISCVFloatABISoft, flagRISCVFloatABIDouble, and newer flags
		return 0
	}
}
