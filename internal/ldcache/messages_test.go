package ldcache

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// TestParseCacheMessagesBounded: the names and paths of an image's cache are the image's; a
// cache whose entries are megabytes long and out of order is refused naming them cut (the
// reason ends up in a log line), not whole.
func TestParseCacheMessagesBounded(t *testing.T) {
	long := strings.Repeat("a", 1<<20)
	nameA, nameB := "lib"+long+"b.so.1", "lib"+long+"a.so.1"
	pathA, pathB := "/lib/"+nameA, "/lib/"+nameB
	data, err := (&Cache{Entries: []Entry{x64(nameA, pathA), x64(nameB, pathB)}}).Encode()
	if err != nil {
		t.Fatal(err)
	}
	// Swap the two entries: ldconfig writes them the other way round.
	e0, e1 := newHeaderSize, newHeaderSize+newEntrySize
	first := append([]byte(nil), data[e0:e1]...)
	copy(data[e0:], data[e1:e1+newEntrySize])
	copy(data[e1:], first)

	cut := func(s string) string { return strconv.Quote(s[:256]) + fmt.Sprintf("… (%d bytes)", len(s)) }
	_, err = ParseCache(data)
	want := "malformed ld.so.cache: entries 0 (" + cut(nameB) + " => " + cut(pathB) + ") and 1 (" + cut(nameA) + " => " + cut(pathA) + ") are not in ldconfig's order"
	if err == nil || err.Error() != want || !errors.Is(err, ErrFormat) {
		t.Fatalf("error (%d bytes):\n%.1500s\nwant\n%s", len(fmt.Sprint(err)), err, want)
	}

	// Encode names what it refuses the same way.
	_, err = (&Cache{Entries: []Entry{x64("", "/"+long)}}).Encode()
	if want := `encode ld cache: entry 0 ("" => ` + cut("/"+long) + `): name and path must be non-empty, without NUL bytes`; err == nil || err.Error() != want {
		t.Errorf("Encode error (%d bytes):\n%.1500s\nwant\n%s", len(fmt.Sprint(err)), err, want)
	}
	_, err = (&Cache{GlibcHwcaps: []string{"b" + long, "a" + long}}).Encode()
	if want := `encode ld cache: glibc-hwcaps subdirectory names are not sorted and distinct: ` + cut("b"+long) + ` before ` + cut("a"+long); err == nil || err.Error() != want {
		t.Errorf("Encode error (%d bytes):\n%.1500s\nwant\n%s", len(fmt.Sprint(err)), err, want)
	}
}
