package ldcache

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"strings"
	"testing"
)

// FuzzParse checks that no input makes Parse panic, read out of bounds,
// return an error that does not wrap ErrFormat, or return entries the
// input could not hold. Seeds: the real caches in testdata (written by
// glibc 2.36's ldconfig in each format) and hand-made edge cases.
//
//	go test -run='^$' -fuzz=FuzzParse -fuzztime=20s ./internal/ldcache/
func FuzzParse(f *testing.F) {
	for _, tc := range ldconfigFormats {
		data, err := os.ReadFile(tc.file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	one := []cacheEntry{{flags: 0x0303, key: 77, value: 72}}
	newOne := encodeNew(binary.LittleEndian, endianLittle, one, "/lib/libz.so.1\x00")
	f.Add(newOne)
	f.Add(encodeNew(binary.BigEndian, endianBig, one, "/lib/libz.so.1\x00"))
	f.Add(encodeOld([]cacheEntry{{flags: 1, key: 5}}, "/lib/libz.so.1\x00", 0, nil))
	f.Add(encodeOld([]cacheEntry{{flags: 1}}, "", 0, newOne))
	f.Add([]byte(oldMagic))
	f.Add([]byte(newMagic))
	f.Add([]byte{})

	f.Fuzz(func(t *testing.T, data []byte) {
		entries, err := Parse(data)
		if err != nil {
			if !errors.Is(err, ErrFormat) {
				t.Fatalf("Parse error %v does not wrap ErrFormat", err)
			}
			if entries != nil {
				t.Fatalf("Parse returned %d entries with error %v", len(entries), err)
			}
			return
		}
		// Every entry takes at least an old-format entry's 12 bytes.
		if len(entries) > len(data)/oldEntrySize {
			t.Fatalf("Parse returned %d entries from %d bytes", len(entries), len(data))
		}
		for i, e := range entries {
			if e.Name == "" || e.Path == "" || strings.ContainsRune(e.Name, 0) || strings.ContainsRune(e.Path, 0) {
				t.Fatalf("entry %d = %+v: want non-empty NUL-free name and path", i, e)
			}
			if !bytes.Contains(data, []byte(e.Name+"\x00")) || !bytes.Contains(data, []byte(e.Path+"\x00")) {
				t.Fatalf("entry %d = %+v: name or path is not in the input", i, e)
			}
			if e.Bits != bits(e.Flags) {
				t.Fatalf("entry %d = %+v: Bits does not match Flags", i, e)
			}
		}
	})
}
