package ldcache

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	mathbits "math/bits"
	"path"
	"runtime"
	"slices"
	"sort"
	"strings"

	"github.com/gpu-runtime/gpu-runtime/internal/quote"
)

// Cache is an ld.so.cache as the dynamic linker reads it. Its entries are in the order
// ldconfig writes them (see Add): the loader binary-searches them, so Encode refuses others.
type Cache struct {
	// Entries are the libraries, in file order.
	Entries []Entry
	// GlibcHwcaps are the names of the glibc-hwcaps subdirectories (such as "x86-64-v3") that
	// entries with the HwcapExtension bit refer to by index, sorted as strcmp sorts them, as
	// the loader requires.
	GlibcHwcaps []string
	// Generator says what wrote the cache, e.g. "ldconfig (Debian GLIBC 2.36-9+deb12u14)
	// stable release version 2.36". Only ldconfig -p shows it; the loader ignores it.
	Generator string
}

// HwcapExtension is the bit of Entry.Hwcap (DL_CACHE_HWCAP_EXTENSION in glibc's dl-cache.h)
// that marks an entry in a glibc-hwcaps subdirectory. The lower 32 bits of such an entry index
// Cache.GlibcHwcaps, and bits 32 to 41 hold the ISA level it needs.
const HwcapExtension uint64 = 1 << 62

// hwcapISALevelMask is DL_CACHE_HWCAP_ISA_LEVEL_MASK: the ISA-level bits of the upper half of
// Entry.Hwcap, which dl_cache_hwcap_extension ignores.
const hwcapISALevelMask = 1<<10 - 1

// Extension directory layout (struct cache_extension and struct cache_extension_section in
// dl-cache.h).
const (
	extensionMagic       = 0xeaa42174 // (uint32_t) -358342284
	extensionHeaderSize  = 8          // uint32 magic, count
	extensionSectionSize = 16         // uint32 tag, flags, offset, size

	tagGenerator   = 0 // cache_extension_tag_generator: bytes
	tagGlibcHwcaps = 1 // cache_extension_tag_glibc_hwcaps: uint32 string offsets
)

// isExtension reports whether hwcap marks a glibc-hwcaps entry, as dl_cache_hwcap_extension
// does: only the extension bit is set in the upper half, ignoring the ISA-level bits.
func isExtension(hwcap uint64) bool {
	return (hwcap>>32)&^hwcapISALevelMask == HwcapExtension>>32
}

// hwcapIndex returns a glibc-hwcaps entry's index in GlibcHwcaps, the lower half of hwcap.
func hwcapIndex(hwcap uint64) uint32 {
	return uint32(hwcap) //nolint:gosec // G115: the lower half is the index, by the format (dl-cache.h)
}

// HwcapsSubdirectory returns the name of the glibc-hwcaps subdirectory e is in, and false if e
// is not a glibc-hwcaps entry of c.
func (c *Cache) HwcapsSubdirectory(e Entry) (string, bool) {
	if !isExtension(e.Hwcap) {
		return "", false
	}
	i := hwcapIndex(e.Hwcap)
	if uint64(i) >= uint64(len(c.GlibcHwcaps)) {
		return "", false
	}
	return c.GlibcHwcaps[i], true
}

// ParseCache parses an ld.so.cache file into a Cache that Encode writes back unchanged. It
// reads every format Load reads, but the cache must be one ldconfig could have written, so
// that Add can extend it where ldconfig would: entries out of ldconfig's order, a malformed
// extension directory, unsorted glibc-hwcaps names, a glibc-hwcaps entry pointing past them,
// or more than MaxSize bytes are errors wrapping ErrFormat (the caller can run ldconfig).
//
// In a combined cache (ldconfig -c compat) ldconfig writes the string offsets of glibc-hwcaps
// names relative to the new-format part, like its other offsets, while glibc 2.36's loader and
// ldconfig -p read them from the start of the file and never match them. ParseCache reads
// them as ldconfig wrote them.
func ParseCache(data []byte) (*Cache, error) {
	if len(data) > MaxSize {
		return nil, fmt.Errorf("%w: %d bytes, larger than %d", ErrFormat, len(data), MaxSize)
	}
	entries, np, err := parse(data)
	if err != nil {
		return nil, err
	}
	c := &Cache{Entries: entries}
	if np != nil {
		if err := c.parseExtensions(data, np); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrFormat, err)
		}
	}
	if err := c.checkEntries(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrFormat, err)
	}
	return c, nil
}

// parseExtensions reads the extension directory of the new-format part np of the file data,
// following cache_extension_load in glibc's dl-cache.h: its offsets count from the start of
// the file, and sections with unknown tags are skipped. Where a tag repeats, the last section
// counts, as in glibc. Unlike glibc, which ignores a directory or hwcaps section it finds
// malformed, parseExtensions fails.
func (c *Cache) parseExtensions(data []byte, np *newPart) error {
	off := uint64(np.extOff)
	if off == 0 {
		return nil // no extensions: written before glibc 2.33
	}
	size := uint64(len(data))
	switch {
	case off%4 != 0:
		return fmt.Errorf("extension directory offset %d is not a multiple of 4", off)
	case off+extensionHeaderSize > size:
		return fmt.Errorf("extension directory at offset %d does not fit in %d bytes", off, size)
	}
	if magic := np.order.Uint32(data[off:]); magic != extensionMagic {
		return fmt.Errorf("extension directory at offset %d: magic %#x, want %#x", off, magic, extensionMagic)
	}
	count := uint64(np.order.Uint32(data[off+4:]))
	if off+extensionHeaderSize+count*extensionSectionSize > size {
		return fmt.Errorf("extension directory at offset %d: %d sections do not fit in %d bytes", off, count, size)
	}
	var hwcaps []byte
	for i := range count {
		s := data[off+extensionHeaderSize+i*extensionSectionSize:]
		tag := np.order.Uint32(s[0:])
		secOff, secSize := uint64(np.order.Uint32(s[8:])), uint64(np.order.Uint32(s[12:]))
		if secOff+secSize > size {
			return fmt.Errorf("extension section %d (tag %d): %d bytes at offset %d do not fit in %d bytes", i, tag, secSize, secOff, size)
		}
		switch tag {
		case tagGenerator:
			c.Generator = string(data[secOff : secOff+secSize])
		case tagGlibcHwcaps:
			if secSize != 0 && (secOff%4 != 0 || secSize%4 != 0) {
				return fmt.Errorf("glibc-hwcaps section: %d bytes at offset %d, want a multiple of 4 at a multiple of 4", secSize, secOff)
			}
			hwcaps = data[secOff : secOff+secSize]
		}
	}
	if len(hwcaps) == 0 {
		return nil // glibc ignores an empty section
	}
	strs := string(data[np.off:])
	c.GlibcHwcaps = make([]string, 0, len(hwcaps)/4)
	for i := 0; i < len(hwcaps); i += 4 {
		name, err := cString(strs, np.order.Uint32(hwcaps[i:]))
		if err != nil {
			return fmt.Errorf("glibc-hwcaps subdirectory %d: %w", i/4, err)
		}
		c.GlibcHwcaps = append(c.GlibcHwcaps, name)
	}
	return checkHwcapsNames(c.GlibcHwcaps)
}

// checkHwcapsNames checks that names are sorted and distinct: the loader merges them with its
// own sorted list of subdirectories to rank them.
func checkHwcapsNames(names []string) error {
	for i, name := range names {
		if name == "" || strings.IndexByte(name, 0) >= 0 {
			return fmt.Errorf("glibc-hwcaps subdirectory %d: name %s is empty or holds a NUL byte", i, quote.Value(name))
		}
		if i > 0 && names[i-1] >= name {
			return fmt.Errorf("glibc-hwcaps subdirectory names are not sorted and distinct: %s before %s", quote.Value(names[i-1]), quote.Value(name))
		}
	}
	return nil
}

// checkEntries checks that every entry has a name and a path, every glibc-hwcaps entry names
// a subdirectory, and the entries are in ldconfig's order.
func (c *Cache) checkEntries() error {
	for i, e := range c.Entries {
		if e.Name == "" || e.Path == "" || strings.IndexByte(e.Name, 0) >= 0 || strings.IndexByte(e.Path, 0) >= 0 {
			return fmt.Errorf("entry %d (%s => %s): name and path must be non-empty, without NUL bytes", i, quote.Value(e.Name), quote.Value(e.Path))
		}
		if isExtension(e.Hwcap) && uint64(hwcapIndex(e.Hwcap)) >= uint64(len(c.GlibcHwcaps)) {
			return fmt.Errorf("entry %d (%s): glibc-hwcaps subdirectory %d of %d", i, quote.Value(e.Name), hwcapIndex(e.Hwcap), len(c.GlibcHwcaps))
		}
	}
	for i := 1; i < len(c.Entries); i++ {
		if c.compare(&c.Entries[i-1], &c.Entries[i]) > 0 {
			return fmt.Errorf("entries %d (%s => %s) and %d (%s => %s) are not in ldconfig's order",
				i-1, quote.Value(c.Entries[i-1].Name), quote.Value(c.Entries[i-1].Path), i, quote.Value(c.Entries[i].Name), quote.Value(c.Entries[i].Path))
		}
	}
	return nil
}

// compare orders entries as compare in glibc's elf/cache.c (2.33 and later) does: a result
// above 0 means e1 goes after e2. Keys sort in descending _dl_cache_libcmp order, which the
// loader's binary search expects; among equal keys, higher flags first, then glibc-hwcaps
// entries (by subdirectory name) before the others, which the loader relies on when it stops
// at the first plain entry after a glibc-hwcaps match, then more hwcap bits, a higher hwcap
// and a higher OS version first. Entries must name existing glibc-hwcaps subdirectories
// (checkEntries).
func (c *Cache) compare(e1, e2 *Entry) int {
	if res := cmp.Or(libcmp(e2.Name, e1.Name, charSigned), cmp.Compare(e2.Flags, e1.Flags)); res != 0 {
		return res
	}
	h1, ext1 := c.HwcapsSubdirectory(*e1)
	h2, ext2 := c.HwcapsSubdirectory(*e2)
	if ext1 != ext2 {
		if ext1 {
			return -1
		}
		return 1
	}
	// ldconfig's own struct keeps hwcap 0 for glibc-hwcaps entries, so only legacy hwcaps
	// count here.
	var hw1, hw2 uint64
	if !ext1 {
		hw1 = e1.Hwcap
	}
	if !ext2 {
		hw2 = e2.Hwcap
	}
	return cmp.Or(
		strings.Compare(h1, h2),
		cmp.Compare(mathbits.OnesCount64(hw2), mathbits.OnesCount64(hw1)),
		cmp.Compare(hw2, hw1),
		cmp.Compare(e2.OSVersion, e1.OSVersion),
	)
}

// libcmp is glibc's _dl_cache_libcmp: it compares like strcmp, except that runs of digits
// compare by their numeric value and a digit sorts after any other character. The arithmetic
// is C's on 32-bit int, wrapping as the compiled loader does; charSigned says whether C's char
// is signed on the target, which decides how bytes from 0x80 up compare.
func libcmp(s1, s2 string, charSigned bool) int {
	// char returns s[i] as C's char, or the terminating NUL past the end.
	char := func(s string, i int) int32 {
		switch {
		case i >= len(s):
			return 0
		case charSigned:
			return int32(int8(s[i])) //nolint:gosec // G115: the byte as C's signed char, as the loader compares it
		}
		return int32(s[i])
	}
	// Skip the bytes both start with, back to the start of any run of digits they end in: up
	// to there both compare equal.
	k := 0
	for k < len(s1) && k < len(s2) && s1[k] == s2[k] {
		k++
	}
	for k > 0 && isDigit(int32(s1[k-1])) {
		k--
	}
	i, j := k, k
	for i < len(s1) {
		c1, c2 := char(s1, i), char(s2, j)
		d1, d2 := isDigit(c1), isDigit(c2)
		switch {
		case d1 && d2:
			var v1, v2 int32
			for ; i < len(s1) && isDigit(int32(s1[i])); i++ {
				v1 = v1*10 + int32(s1[i]) - '0'
			}
			for ; j < len(s2) && isDigit(int32(s2[j])); j++ {
				v2 = v2*10 + int32(s2[j]) - '0'
			}
			if v1 != v2 {
				return int(v1 - v2)
			}
		case d1:
			return 1
		case d2:
			return -1
		case c1 != c2:
			return int(c1 - c2)
		default:
			i++
			j++
		}
	}
	return int(-char(s2, j))
}

func isDigit(c int32) bool { return c >= '0' && c <= '9' }

// charSigned says whether C's char is signed where this program runs, which is where the
// loader that reads the cache runs: signed on x86 and LoongArch, unsigned on Arm, POWER, s390x
// and RISC-V.
var charSigned = !slices.Contains([]string{"arm", "arm64", "ppc64", "ppc64le", "s390x", "riscv64"}, runtime.GOARCH)

// Library is a library for Add to put in a cache.
type Library struct {
	Name  string // the SONAME the loader looks up, e.g. "libcuda.so.1"
	Path  string // absolute path of the SONAME link in the container
	Flags int32  // the library's ABI, from FlagsFor

	// First puts the library before the entries it ties with in ldconfig's order (same key,
	// flags, hwcap and OS version), as if ldconfig had read its directory first; otherwise it
	// goes after them, as if its directory came last. glibc-hwcaps entries for the same key
	// stay in front either way, where ldconfig puts them (the loader prefers them when the CPU
	// supports their subdirectory).
	First bool
}

// Add puts libs into c where ldconfig would put them (see Library.First). A library replaces
// an entry with the same name, flags and path and no hwcap, which keeps its place if they tie
// unless the library goes first. Of two First libraries that tie, the later added ends up in
// front. Every other entry is kept, glibc-hwcaps entries included. Add checks every library,
// and c's order, before changing c, and reports every problem.
func (c *Cache) Add(libs ...Library) error {
	var errs []error
	for _, l := range libs {
		if err := l.check(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := c.checkEntries(); err != nil {
		errs = append(errs, fmt.Errorf("add to ld cache: %w", err))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	for _, l := range libs {
		c.add(Entry{Name: l.Name, Path: l.Path, Flags: l.Flags, Bits: bits(l.Flags)}, l.First)
	}
	return nil
}

// check reports what makes l unusable as a cache entry.
func (l Library) check() error {
	var problems []string
	if l.Name == "" || strings.ContainsAny(l.Name, "/\x00") {
		problems = append(problems, "the name must be a non-empty file name without NUL bytes")
	}
	if !path.IsAbs(l.Path) || strings.IndexByte(l.Path, 0) >= 0 {
		problems = append(problems, "the path must be absolute, without NUL bytes")
	}
	if len(problems) == 0 {
		return nil
	}
	return fmt.Errorf("add library %s => %s to ld cache: %s", quote.Value(l.Name), quote.Value(l.Path), strings.Join(problems, "; "))
}

// add inserts e into c's sorted entries; first says to go before ties.
func (c *Cache) add(e Entry, first bool) {
	// Entries whose key compares equal are contiguous; look for the one to replace among them.
	lo := sort.Search(len(c.Entries), func(i int) bool { return libcmp(e.Name, c.Entries[i].Name, charSigned) >= 0 })
	for i := lo; i < len(c.Entries) && libcmp(e.Name, c.Entries[i].Name, charSigned) == 0; i++ {
		old := &c.Entries[i]
		if old.Name != e.Name || old.Flags != e.Flags || old.Hwcap != 0 || old.Path != e.Path {
			continue
		}
		if !first && c.compare(old, &e) == 0 {
			*old = e
			return
		}
		c.Entries = slices.Delete(c.Entries, i, i+1)
		break
	}
	// ldconfig's add_to_cache inserts before the first entry that sorts after the new one;
	// going first means before the first that does not sort before it.
	at := sort.Search(len(c.Entries), func(i int) bool {
		res := c.compare(&c.Entries[i], &e)
		return res > 0 || first && res == 0
	})
	c.Entries = slices.Insert(c.Entries, at, e)
}

// FlagsFor returns the cache flags ldconfig records for a glibc library of the given word size
// (32 or 64) and ELF e_machine, as each architecture's readelflib.c in glibc's sysdeps sets
// them: FLAG_ELF_LIBC6 plus the ABI. It fails where the flags depend on more, such as the
// float ABI of 32-bit Arm and RISC-V libraries (in the ELF header's flags).
func FlagsFor(bits int, machine uint16) (int32, error) {
	// e_machine values (ELF gABI): debug/elf is not imported for five numbers, which would
	// link its package initialisation into gpu-runtime.
	const (
		emI386, emPPC64, emS390, emX8664, emAArch64 = 3, 21, 22, 62, 183
		flagELFLibc6                                = 0x0003
	)
	type abi struct {
		bits    int
		machine uint16
	}
	required, ok := map[abi]int32{
		{64, emX8664}: flagX8664Lib64, {32, emX8664}: flagX8664LibX32, {32, emI386}: 0,
		{64, emAArch64}: flagAArch64Lib64, {64, emPPC64}: flagPowerPCLib64, {64, emS390}: flagS390Lib64,
	}[abi{bits, machine}]
	if !ok {
		return 0, fmt.Errorf("find ld cache flags for %d-bit libraries of ELF machine %d: not supported", bits, machine)
	}
	return required | flagELFLibc6, nil
}

// Encode returns c in the "glibc-ld.so.cache1.1" format (ldconfig -c new, the default since
// glibc 2.33), in this machine's byte order with the byte-order flag set, laid out byte for
// byte as glibc 2.36's ldconfig lays out the same entries: the string table with shared
// suffixes, then the extension directory with the generator and any glibc-hwcaps section.
//
// For any c from ParseCache and Add, ParseCache(Encode(c)) equals c. Encode fails if an entry
// has an empty or NUL-holding name or path, GlibcHwcaps is not sorted and distinct, an entry
// refers past GlibcHwcaps, the entries are not in ldconfig's order, or the file would exceed
// MaxSize (which only a parsed old-format cache of over half of MaxSize can).
func (c *Cache) Encode() ([]byte, error) {
	return c.encode(binary.NativeEndian, nativeEndianFlag)
}

// nativeEndianFlag is cache_file_new_flags_endian_current.
var nativeEndianFlag = func() byte {
	if binary.NativeEndian.Uint16([]byte{1, 0}) == 1 {
		return endianLittle
	}
	return endianBig
}()

func (c *Cache) encode(order binary.ByteOrder, endianFlag byte) ([]byte, error) {
	if err := checkHwcapsNames(c.GlibcHwcaps); err != nil {
		return nil, fmt.Errorf("encode ld cache: %w", err)
	}
	if err := c.checkEntries(); err != nil {
		return nil, fmt.Errorf("encode ld cache: %w", err)
	}
	// Bound the strings before laying them out with 32-bit offsets.
	total := uint64(len(c.Generator))
	for _, e := range c.Entries {
		total += uint64(len(e.Name)) + uint64(len(e.Path)) + 2
	}
	for _, name := range c.GlibcHwcaps {
		total += uint64(len(name)) + 1
	}
	if total > MaxSize {
		return nil, fmt.Errorf("encode ld cache: %d bytes of strings, more than %d", total, MaxSize)
	}

	strs := newStringTable(c)
	n := uint64(len(c.Entries))
	strStart := newHeaderSize + n*newEntrySize
	extOff := (strStart + uint64(len(strs.data)) + 3) &^ 3
	sections := uint64(1)
	if len(c.GlibcHwcaps) > 0 {
		sections++
	}
	hwcapsOff := extOff + extensionHeaderSize + sections*extensionSectionSize
	generatorOff := hwcapsOff + 4*uint64(len(c.GlibcHwcaps))
	size := generatorOff + uint64(len(c.Generator))
	if size > MaxSize {
		return nil, fmt.Errorf("encode ld cache: %d bytes, larger than %d", size, MaxSize)
	}

	b := make([]byte, size)
	copy(b, newMagic)
	order.PutUint32(b[20:], off32(n))
	order.PutUint32(b[24:], off32(len(strs.data)))
	b[28] = endianFlag
	order.PutUint32(b[32:], off32(extOff))
	for i, e := range c.Entries {
		p := b[newHeaderSize+uint64(i)*newEntrySize:]
		order.PutUint32(p[0:], uint32(e.Flags)) //nolint:gosec // G115: the flags' bits, as ldconfig stores its int32
		order.PutUint32(p[4:], off32(strStart)+strs.offsets[2*i])
		order.PutUint32(p[8:], off32(strStart)+strs.offsets[2*i+1])
		order.PutUint32(p[12:], e.OSVersion)
		order.PutUint64(p[16:], e.Hwcap)
	}
	copy(b[strStart:], strs.data)

	ext := b[extOff:]
	order.PutUint32(ext[0:], extensionMagic)
	order.PutUint32(ext[4:], off32(sections))
	sec := ext[extensionHeaderSize:]
	order.PutUint32(sec[0:], tagGenerator)
	order.PutUint32(sec[8:], off32(generatorOff))
	order.PutUint32(sec[12:], off32(len(c.Generator)))
	if len(c.GlibcHwcaps) > 0 {
		sec = sec[extensionSectionSize:]
		order.PutUint32(sec[0:], tagGlibcHwcaps)
		order.PutUint32(sec[8:], off32(hwcapsOff))
		order.PutUint32(sec[12:], off32(4*len(c.GlibcHwcaps)))
		for i := range c.GlibcHwcaps {
			order.PutUint32(b[hwcapsOff+4*uint64(i):], off32(strStart)+strs.offsets[2*len(c.Entries)+i])
		}
	}
	copy(b[generatorOff:], c.Generator)
	return b, nil
}

// off32 returns v, a count, offset or size in an encoded cache, as the format's uint32: encode
// bounds the file, and the strings given to newStringTable, by MaxSize first.
func off32[T int | uint64](v T) uint32 {
	return uint32(v)
}

// stringTable is the string table of an encoded cache.
type stringTable struct {
	data []byte // the NUL-terminated strings
	// offsets are where each string starts in data: entry i's name at 2i, its path at 2i+1,
	// then the glibc-hwcaps names.
	offsets []uint32
}

// newStringTable lays out every key, path and glibc-hwcaps name of c as glibc's
// stringtable_finalize (elf/stringtable.c) does: distinct strings sorted by their bytes from
// the last, higher first and a string before its own suffixes, and a string that ends the one
// sorting just before it sharing that one's tail. That order is the descending byte order of
// the reversed strings, which is how they are sorted here.
func newStringTable(c *Cache) stringTable {
	n := 2*len(c.Entries) + len(c.GlibcHwcaps)
	str := func(slot int) string {
		if slot >= 2*len(c.Entries) {
			return c.GlibcHwcaps[slot-2*len(c.Entries)]
		}
		if slot%2 == 0 {
			return c.Entries[slot/2].Name
		}
		return c.Entries[slot/2].Path
	}
	// Reverse every string into one buffer.
	total := 0
	for slot := range n {
		total += len(str(slot))
	}
	buf := make([]byte, total)
	at := 0
	for slot := range n {
		s := str(slot)
		r := buf[at : at+len(s)]
		for i := range len(s) {
			r[len(s)-1-i] = s[i]
		}
		at += len(s)
	}
	reversed := buf
	// An item is one string: where its reversal is in reversed, and which string it is. Items
	// hold no pointers, which keeps sorting them free of the garbage collector's write
	// barriers.
	type item struct {
		// head is the first 8 bytes of the reversed string, big-endian and zero-padded
		// (strings hold no NUL): heads that differ order their strings, equal heads need the
		// rest compared.
		head     uint64
		off, len uint32
		slot     uint32
	}
	rev := func(it item) []byte { return reversed[it.off : it.off+it.len] }
	items := make([]item, n)
	at = 0
	for slot := range n {
		l := len(str(slot))
		var head [8]byte
		copy(head[:], reversed[at:at+l])
		items[slot] = item{head: binary.BigEndian.Uint64(head[:]), off: off32(at), len: off32(l), slot: off32(slot)}
		at += l
	}
	// Sort descending: by head with a radix sort (stable, a byte at a time from the last),
	// then each run of equal heads by the rest.
	tmp := make([]item, n)
	for shift := 0; shift < 64; shift += 8 {
		var start [256]int
		for _, it := range items {
			start[255-byte(it.head>>shift)]++ //nolint:gosec // G115: the radix sort's digit is that byte
		}
		sum := 0
		for b, c := range start {
			start[b], sum = sum, sum+c
		}
		for _, it := range items {
			b := 255 - byte(it.head>>shift) //nolint:gosec // G115: the radix sort's digit is that byte
			tmp[start[b]] = it
			start[b]++
		}
		items, tmp = tmp, items
	}
	for i := 0; i < n; {
		j := i + 1
		for j < n && items[j].head == items[i].head {
			j++
		}
		if j-i > 1 {
			slices.SortFunc(items[i:j], func(a, b item) int { return bytes.Compare(rev(b), rev(a)) })
		}
		i = j
	}

	offsets := make([]uint32, n)
	var size uint32
	own := make([]uint32, 0, n) // the slots of strings that are no other's tail
	for j, it := range items {
		if j > 0 {
			// A repeat of the string before it, or its tail (then it sorts right after it, as
			// the reversed string's prefix).
			prev := items[j-1]
			if bytes.HasPrefix(rev(prev), rev(it)) {
				offsets[it.slot] = offsets[prev.slot] + prev.len - it.len
				continue
			}
		}
		offsets[it.slot] = size
		size += it.len + 1
		own = append(own, it.slot)
	}
	data := make([]byte, size)
	for _, slot := range own {
		copy(data[offsets[slot]:], str(int(slot)))
	}
	return stringTable{data: data, offsets: offsets}
}
