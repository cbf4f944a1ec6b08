package ldupdate

import (
	"bytes"
	"errors"
	"testing"

	"github.com/gpu-runtime/gpu-runtime/internal/testimage"
)

// FuzzELF feeds the bounded ELF reader arbitrary files, as an image can: it must never
// panic, every error must say the file is not a readable ELF file (or has no SONAME), and a
// SONAME or section it returns must come from the input and stay within the bounds.
//
//	go test -run='^$' -fuzz=FuzzELF -fuzztime=100000x ./internal/hook/
func FuzzELF(f *testing.F) {
	for _, arch := range []testimage.Arch{testimage.AMD64, testimage.I386, testimage.AArch64} {
		data, err := testimage.SharedObject(arch, "libcuda.so.1", "libc.so.6")
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add(noteELF(cudaNote("560.35.03"), nil))
	f.Add(noteELF(nil, nil))
	f.Add([]byte("\x7fELF"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		ef, err := readELF(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			if !errors.Is(err, errELF) {
				t.Fatalf("readELF error %v does not wrap errELF", err)
			}
			return
		}
		soname, err := ef.soname()
		switch {
		case err == nil:
			if len(soname) == 0 || len(soname) > maxELFString || !bytes.Contains(data, []byte(soname+"\x00")) {
				t.Fatalf("soname %q is not a bounded string of the input", soname)
			}
		case !errors.Is(err, errELF) && !errors.Is(err, errNoSoname):
			t.Fatalf("soname error %v wraps neither errELF nor errNoSoname", err)
		}
		sec, err := ef.section(compatNote, maxCompatNote)
		switch {
		case err == nil:
			if len(sec) > maxCompatNote || !bytes.Contains(data, sec) {
				t.Fatalf("section of %d bytes is not a bounded part of the input", len(sec))
			}
		case !errors.Is(err, errELF):
			t.Fatalf("section error %v does not wrap errELF", err)
		}
	})
}
