package ldupdate

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
)

// The update reads ELF files it does not trust: the image's CUDA compat libraries, and the
// injected libraries at their container paths. debug/elf reads whole tables and sections into
// memory (a sparse file can declare a section-name table of a gigabyte), so the update has its
// own reader, which reads only what it needs, each read bounded before it is made.
const (
	maxELFProgs    = 256
	maxELFSections = 1024
	maxELFDynamic  = 64 << 10
	maxELFShstrtab = 64 << 10
	maxELFString   = 255 // a SONAME is a file name
)

// The few ELF constants the reader needs, from the ELF specification (gABI). debug/elf is not
// imported for them: gpu-runtime would link its package initialisation and tables.
const (
	elfMagic                  = "\x7fELF"
	eiClass, eiData           = 4, 5
	elfClass32, elfClass64    = 1, 2
	elfData2LSB, elfData2MSB  = 1, 2
	etExec, etDyn             = 2, 3
	ptLoad, ptDynamic         = 1, 2
	ptInterp                  = 3
	dtNull, dtStrtab, dtStrsz = 0, 5, 10
	dtSoname                  = 14
	shtNobits                 = 8
)

// errELF marks a file the bounded ELF reader refuses.
var errELF = errors.New("not a readable ELF file")

// elfFile is the header of an ELF file and the reader it came from.
type elfFile struct {
	r       io.ReaderAt
	size    int64
	class   byte
	order   binary.ByteOrder
	machine uint16
	typ     uint16

	phoff, shoff           uint64
	phnum, shnum, shstrndx uint64
	phentsize, shentsize   uint64
}

// readELF reads and checks the ELF header of r, a file of size bytes: a 32- or 64-bit ELF of
// either byte order whose program and section header tables have the standard entry size,
// at most maxELFProgs and maxELFSections entries, and lie inside the file.
func readELF(r io.ReaderAt, size int64) (*elfFile, error) {
	var hdr [64]byte
	n, err := r.ReadAt(hdr[:], 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: read header: %w", errELF, err)
	}
	if n < 52 || string(hdr[:4]) != elfMagic {
		return nil, fmt.Errorf("%w: no ELF header", errELF)
	}
	f := &elfFile{r: r, size: size, class: hdr[eiClass]}
	switch hdr[eiData] {
	case elfData2LSB:
		f.order = binary.LittleEndian
	case elfData2MSB:
		f.order = binary.BigEndian
	default:
		return nil, fmt.Errorf("%w: unknown byte order %d", errELF, hdr[eiData])
	}
	phent, shent := uint64(32), uint64(40)
	switch {
	case f.class == elfClass64 && n < 64:
		return nil, fmt.Errorf("%w: header truncated", errELF)
	case f.class == elfClass64:
		phent, shent = 56, 64
	case f.class != elfClass32:
		return nil, fmt.Errorf("%w: unknown class %d", errELF, hdr[eiClass])
	}
	h := hdr[:]
	f.typ, f.machine = f.order.Uint16(h[16:]), f.order.Uint16(h[18:])
	f.phoff, f.shoff = f.word(h, 28, 32), f.word(h, 32, 40)
	f.phentsize, f.phnum = f.half(h, 42, 54), f.half(h, 44, 56)
	f.shentsize, f.shnum, f.shstrndx = f.half(h, 46, 58), f.half(h, 48, 60), f.half(h, 50, 62)
	switch {
	case (f.phnum > 0 && f.phentsize != phent) || (f.shnum > 0 && f.shentsize != shent):
		return nil, fmt.Errorf("%w: unusual header table entry sizes", errELF)
	case f.phnum > maxELFProgs:
		return nil, fmt.Errorf("%w: %d program headers, more than %d", errELF, f.phnum, maxELFProgs)
	case f.shnum > maxELFSections:
		return nil, fmt.Errorf("%w: %d section headers, more than %d", errELF, f.shnum, maxELFSections)
	case !f.inside(f.phoff, f.phnum*f.phentsize):
		return nil, fmt.Errorf("%w: program headers outside the file", errELF)
	case !f.inside(f.shoff, f.shnum*f.shentsize):
		return nil, fmt.Errorf("%w: section headers outside the file", errELF)
	}
	return f, nil
}

// word reads a field of 4 bytes at off32 in a 32-bit file, of 8 bytes at off64 in a 64-bit one.
func (f *elfFile) word(b []byte, off32, off64 int) uint64 {
	if f.class == elfClass64 {
		return f.order.Uint64(b[off64:])
	}
	return uint64(f.order.Uint32(b[off32:]))
}

// half reads a 2-byte field, at off32 in a 32-bit file and at off64 in a 64-bit one.
func (f *elfFile) half(b []byte, off32, off64 int) uint64 {
	if f.class == elfClass64 {
		off32 = off64
	}
	return uint64(f.order.Uint16(b[off32:]))
}

// inside says whether n bytes at off lie inside the file.
func (f *elfFile) inside(off, n uint64) bool {
	size := uint64(max(f.size, 0))
	return off <= size && n <= size-off
}

// read reads n bytes at off, which the caller has bounded.
func (f *elfFile) read(off, n uint64) ([]byte, error) {
	if !f.inside(off, n) {
		return nil, fmt.Errorf("%w: %d bytes at offset %d outside the file", errELF, n, off)
	}
	b := make([]byte, n)
	at := int64(off) //nolint:gosec // G115: off is inside the file (checked above), whose size is an int64
	if _, err := f.r.ReadAt(b, at); err != nil && !(errors.Is(err, io.EOF) && n == 0) {
		return nil, fmt.Errorf("%w: read %d bytes at offset %d: %w", errELF, n, off, err)
	}
	return b, nil
}

// elfProg is the part of a program header the reader uses.
type elfProg struct {
	typ                uint32
	off, vaddr, filesz uint64
}

func (f *elfFile) progs() ([]elfProg, error) {
	raw, err := f.read(f.phoff, f.phnum*f.phentsize)
	if err != nil {
		return nil, err
	}
	progs := make([]elfProg, f.phnum)
	for i := range progs {
		p := raw[uint64(i)*f.phentsize:]
		progs[i] = elfProg{typ: f.order.Uint32(p), off: f.word(p, 4, 8), vaddr: f.word(p, 8, 16), filesz: f.word(p, 16, 32)}
	}
	return progs, nil
}

// errNoSoname: the library has a dynamic section without DT_SONAME.
var errNoSoname = errors.New("no DT_SONAME")

// soname returns the library's DT_SONAME, found as the dynamic linker and ldconfig find it:
// through the PT_DYNAMIC segment, with DT_STRTAB's address mapped to a file offset by the
// PT_LOAD segment that holds it. errNoSoname says the library has none; a file with no
// PT_DYNAMIC is not a shared library (errELF).
func (f *elfFile) soname() (string, error) {
	progs, err := f.progs()
	if err != nil {
		return "", err
	}
	i := slices.IndexFunc(progs, func(p elfProg) bool { return p.typ == ptDynamic })
	if i < 0 {
		return "", fmt.Errorf("%w: no PT_DYNAMIC segment: not a shared library", errELF)
	}
	dyn := progs[i]
	if dyn.filesz > maxELFDynamic {
		return "", fmt.Errorf("%w: dynamic segment of %d bytes, more than %d", errELF, dyn.filesz, maxELFDynamic)
	}
	raw, err := f.read(dyn.off, dyn.filesz)
	if err != nil {
		return "", err
	}
	var strtab, strsz, soname uint64
	haveStrtab, haveSoname := false, false
	entrySize := uint64(8) // two words
	if f.class == elfClass64 {
		entrySize = 16
	}
entries:
	for i := uint64(0); i+entrySize <= uint64(len(raw)); i += entrySize {
		tag, val := f.word(raw[i:], 0, 0), f.word(raw[i:], 4, 8)
		switch tag {
		case dtNull:
			break entries
		case dtStrtab:
			strtab, haveStrtab = val, true
		case dtStrsz:
			strsz = val
		case dtSoname:
			soname, haveSoname = val, true
		}
	}
	if !haveSoname {
		return "", errNoSoname
	}
	if !haveStrtab || soname >= strsz {
		return "", fmt.Errorf("%w: DT_SONAME outside the string table", errELF)
	}
	off, ok := uint64(0), false
	for _, p := range progs {
		if p.typ == ptLoad && strtab >= p.vaddr && strtab-p.vaddr < p.filesz {
			off, ok = p.off+(strtab-p.vaddr), true
			break
		}
	}
	if !ok || off+soname < off {
		return "", fmt.Errorf("%w: string table at address %#x is in no loaded segment", errELF, strtab)
	}
	return f.cString(off+soname, min(strsz-soname, maxELFString+1))
}

// cString reads the NUL-terminated string at off, which must end within limit bytes.
func (f *elfFile) cString(off, limit uint64) (string, error) {
	size := uint64(max(f.size, 0))
	if off >= size {
		return "", fmt.Errorf("%w: string at offset %d outside the file", errELF, off)
	}
	b, err := f.read(off, min(limit, size-off))
	if err != nil {
		return "", err
	}
	i := bytes.IndexByte(b, 0)
	switch {
	case i < 0:
		return "", fmt.Errorf("%w: string at offset %d is not NUL-terminated within %d bytes", errELF, off, len(b))
	case i == 0:
		return "", fmt.Errorf("%w: empty string at offset %d", errELF, off)
	}
	return string(b[:i]), nil
}

// section returns the contents of the section called name, or nil when there is none; a
// section larger than limit is an error. The section-name table is read first, at most
// maxELFShstrtab bytes of it.
func (f *elfFile) section(name string, limit uint64) ([]byte, error) {
	if f.shnum == 0 {
		return nil, nil
	}
	if f.shstrndx >= f.shnum {
		return nil, fmt.Errorf("%w: section-name table index %d of %d sections", errELF, f.shstrndx, f.shnum)
	}
	raw, err := f.read(f.shoff, f.shnum*f.shentsize)
	if err != nil {
		return nil, err
	}
	type sect struct{ name, off, size, typ uint64 }
	get := func(i uint64) sect {
		s := raw[i*f.shentsize:]
		return sect{name: uint64(f.order.Uint32(s)), typ: uint64(f.order.Uint32(s[4:])), off: f.word(s, 16, 24), size: f.word(s, 20, 32)}
	}
	strs := get(f.shstrndx)
	if strs.size > maxELFShstrtab {
		return nil, fmt.Errorf("%w: section-name table of %d bytes, more than %d", errELF, strs.size, maxELFShstrtab)
	}
	names, err := f.read(strs.off, strs.size)
	if err != nil {
		return nil, err
	}
	for i := uint64(0); i < f.shnum; i++ {
		s := get(i)
		if s.name >= uint64(len(names)) {
			continue
		}
		n := names[s.name:]
		if end := bytes.IndexByte(n, 0); end < 0 || string(n[:end]) != name {
			continue
		}
		if s.typ == shtNobits {
			return nil, nil
		}
		if s.size > limit {
			return nil, fmt.Errorf("%w: section %s of %d bytes, more than %d", errELF, name, s.size, limit)
		}
		return f.read(s.off, s.size)
	}
	return nil, nil
}

// StaticLDConfig returns the static executable to run for the configured ldconfig p: p, or
// p.real when p is a wrapper script and p.real is static; otherwise why neither will do.
func StaticLDConfig(p string) (string, error) {
	if !filepath.IsAbs(p) {
		return "", fmt.Errorf("ldconfig path %q is not absolute", p)
	}
	reason := staticExecutable(p)
	if reason != nil {
		if staticExecutable(p+".real") != nil {
			return "", fmt.Errorf("hook.ldconfig %s %v: ldconfig runs inside the container root, where a dynamic executable would run the image's loader; set hook.ldconfig to glibc's static ldconfig", p, reason) //nolint:errorlint // reason completes the sentence ("is a script"); it is not a cause to unwrap
		}
		p += ".real"
	}
	return p, nil
}

// staticExecutable says why p is not a static ELF executable, or nil.
func staticExecutable(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	var magic [4]byte
	if _, err := io.ReadFull(f, magic[:]); err != nil || string(magic[:]) != elfMagic {
		if string(magic[:2]) == "#!" {
			return errors.New("is a script")
		}
		return errors.New("is not an ELF executable")
	}
	st, err := f.Stat()
	if err != nil {
		return err
	}
	ef, err := readELF(f, st.Size())
	var progs []elfProg
	if err == nil {
		progs, err = ef.progs()
	}
	if err != nil {
		return fmt.Errorf("is not a readable ELF file (%w)", err)
	}
	if slices.ContainsFunc(progs, func(p elfProg) bool { return p.typ == ptInterp }) {
		return errors.New("is dynamically linked")
	}
	if ef.typ != etExec && ef.typ != etDyn {
		return errors.New("is not an executable")
	}
	return nil
}
