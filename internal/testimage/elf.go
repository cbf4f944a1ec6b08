package testimage

import (
	"debug/elf"
	"encoding/binary"
	"fmt"
)

// Arch is the ELF class and machine of a shared object.
type Arch struct {
	Class   elf.Class
	Machine elf.Machine
}

// The architectures SharedObject writes.
var (
	AMD64   = Arch{Class: elf.ELFCLASS64, Machine: elf.EM_X86_64}
	I386    = Arch{Class: elf.ELFCLASS32, Machine: elf.EM_386}
	AArch64 = Arch{Class: elf.ELFCLASS64, Machine: elf.EM_AARCH64}
)

// String returns the Debian multiarch tuple of a, e.g. "x86_64-linux-gnu".
func (a Arch) String() string {
	switch a {
	case AMD64:
		return "x86_64-linux-gnu"
	case I386:
		return "i386-linux-gnu"
	case AArch64:
		return "aarch64-linux-gnu"
	}
	return fmt.Sprintf("%v/%v", a.Class, a.Machine)
}

// SharedObject returns a minimal little-endian ELF shared object for arch
// with the given SONAME that depends on needed (DT_NEEDED, in order). It has
// one read-write PT_LOAD segment mapping the whole file at address 0, a
// PT_DYNAMIC segment, a PT_GNU_STACK segment (non-executable stack), a SysV
// hash table, a symbol table holding only the null symbol, and no code.
// ldconfig reads its SONAME and dependencies like any library's, and the
// dynamic linker can map it (dlopen succeeds), but it defines no symbols.
func SharedObject(arch Arch, soname string, needed ...string) ([]byte, error) {
	if soname == "" {
		return nil, fmt.Errorf("write shared object: empty SONAME")
	}
	var w elfWriter
	switch arch.Class {
	case elf.ELFCLASS64:
		w = elfWriter{ehdr: 64, phdr: 56, sym: 24, dyn: 16, word: 8}
	case elf.ELFCLASS32:
		w = elfWriter{ehdr: 52, phdr: 32, sym: 16, dyn: 8, word: 4}
	default:
		return nil, fmt.Errorf("write shared object %q: unsupported ELF class %v", soname, arch.Class)
	}
	return w.write(arch, soname, needed), nil
}

// elfWriter lays out a shared object for one ELF class: the sizes of its
// header, program header, symbol, dynamic entry and address.
type elfWriter struct {
	ehdr, phdr, sym, dyn, word int
}

const numPhdrs = 3 // PT_LOAD, PT_DYNAMIC, PT_GNU_STACK

func align(n, a int) int { return (n + a - 1) &^ (a - 1) }

func (w elfWriter) write(arch Arch, soname string, needed []string) []byte {
	le := binary.LittleEndian
	// Layout: headers, .hash, .dynsym, .dynstr, .dynamic.
	hashOff := w.ehdr + numPhdrs*w.phdr
	hashSize := 4 * 4 // nbucket=1, nchain=1, bucket[0], chain[0]
	symOff := align(hashOff+hashSize, w.word)
	strOff := symOff + w.sym // one symbol: the null symbol
	strtab := []byte{0}
	neededOff := make([]int, len(needed))
	for i, n := range needed {
		neededOff[i] = len(strtab)
		strtab = append(strtab, n...)
		strtab = append(strtab, 0)
	}
	sonameOff := len(strtab)
	strtab = append(strtab, soname...)
	strtab = append(strtab, 0)
	dynOff := align(strOff+len(strtab), w.word)
	type dynEntry struct{ tag, val uint64 }
	var dyns []dynEntry
	for _, off := range neededOff {
		dyns = append(dyns, dynEntry{uint64(elf.DT_NEEDED), uint64(off)})
	}
	dyns = append(dyns,
		dynEntry{uint64(elf.DT_SONAME), uint64(sonameOff)},
		dynEntry{uint64(elf.DT_HASH), uint64(hashOff)},
		dynEntry{uint64(elf.DT_STRTAB), uint64(strOff)},
		dynEntry{uint64(elf.DT_SYMTAB), uint64(symOff)},
		dynEntry{uint64(elf.DT_STRSZ), uint64(len(strtab))},
		dynEntry{uint64(elf.DT_SYMENT), uint64(w.sym)},
		dynEntry{uint64(elf.DT_NULL), 0},
	)
	size := dynOff + len(dyns)*w.dyn
	b := make([]byte, size)

	// putWord writes an address-sized value.
	putWord := func(off int, v uint64) {
		if w.word == 8 {
			le.PutUint64(b[off:], v)
		} else {
			le.PutUint32(b[off:], uint32(v))
		}
	}

	// ELF header.
	copy(b, elf.ELFMAG)
	b[elf.EI_CLASS] = byte(arch.Class)
	b[elf.EI_DATA] = byte(elf.ELFDATA2LSB)
	b[elf.EI_VERSION] = byte(elf.EV_CURRENT)
	b[elf.EI_OSABI] = byte(elf.ELFOSABI_NONE)
	le.PutUint16(b[16:], uint16(elf.ET_DYN))
	le.PutUint16(b[18:], uint16(arch.Machine))
	le.PutUint32(b[20:], uint32(elf.EV_CURRENT))
	// e_entry, e_phoff, e_shoff follow e_version; their width is the word size.
	off := 24
	putWord(off, 0) // e_entry
	off += w.word
	putWord(off, uint64(w.ehdr)) // e_phoff
	off += w.word
	putWord(off, 0) // e_shoff: no section headers
	off += w.word
	le.PutUint32(b[off:], 0) // e_flags
	le.PutUint16(b[off+4:], uint16(w.ehdr))
	le.PutUint16(b[off+6:], uint16(w.phdr))
	le.PutUint16(b[off+8:], numPhdrs)
	le.PutUint16(b[off+10:], 0) // e_shentsize
	le.PutUint16(b[off+12:], 0) // e_shnum
	le.PutUint16(b[off+14:], 0) // e_shstrndx

	// Program headers. The 64-bit layout puts p_flags second; the 32-bit
	// layout puts it after p_memsz.
	phdr := func(i int, typ elf.ProgType, flags elf.ProgFlag, offset, filesz, align uint64) {
		p := w.ehdr + i*w.phdr
		if w.word == 8 {
			le.PutUint32(b[p:], uint32(typ))
			le.PutUint32(b[p+4:], uint32(flags))
			le.PutUint64(b[p+8:], offset)  // p_offset
			le.PutUint64(b[p+16:], offset) // p_vaddr
			le.PutUint64(b[p+24:], offset) // p_paddr
			le.PutUint64(b[p+32:], filesz) // p_filesz
			le.PutUint64(b[p+40:], filesz) // p_memsz
			le.PutUint64(b[p+48:], align)
			return
		}
		le.PutUint32(b[p:], uint32(typ))
		le.PutUint32(b[p+4:], uint32(offset))  // p_offset
		le.PutUint32(b[p+8:], uint32(offset))  // p_vaddr
		le.PutUint32(b[p+12:], uint32(offset)) // p_paddr
		le.PutUint32(b[p+16:], uint32(filesz)) // p_filesz
		le.PutUint32(b[p+20:], uint32(filesz)) // p_memsz
		le.PutUint32(b[p+24:], uint32(flags))
		le.PutUint32(b[p+28:], uint32(align))
	}
	const pageSize = 0x1000
	phdr(0, elf.PT_LOAD, elf.PF_R|elf.PF_W, 0, uint64(size), pageSize)
	phdr(1, elf.PT_DYNAMIC, elf.PF_R|elf.PF_W, uint64(dynOff), uint64(len(dyns)*w.dyn), uint64(w.word))
	phdr(2, elf.PT_GNU_STACK, elf.PF_R|elf.PF_W, 0, 0, 16)

	// SysV hash table with one empty bucket: no symbol is found by name.
	le.PutUint32(b[hashOff:], 1)   // nbucket
	le.PutUint32(b[hashOff+4:], 1) // nchain: the symbol table's size
	// The null symbol and its chain entry are all zeros already.

	copy(b[strOff:], strtab)
	for i, d := range dyns {
		p := dynOff + i*w.dyn
		putWord(p, d.tag)
		putWord(p+w.word, d.val)
	}
	return b
}
