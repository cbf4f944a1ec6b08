package testimage

import "fmt"

// libName is how a library is named on disk.
type libName struct {
	soname  string // e.g. "libavcodec-2.so.59"
	file    string // the versioned file the SONAME link points to
	devLink string // the development link name, "" where the SONAME has no version
}

// distroStems are library names as Debian ships them, digits and dots
// included, so that the names exercise _dl_cache_libcmp's numeric
// comparison the way real caches do.
var distroStems = []string{
	"acl", "apt-pkg", "archive", "asound", "attr", "audit", "avcodec", "avformat", "avutil",
	"blkid", "boost_filesystem", "boost_system", "brotlicommon", "bz2", "cairo", "cap", "cap-ng",
	"crypt", "crypto", "curl-gnutls", "db-5.3", "dbus-1", "drm", "edit", "elf", "expat", "ffi",
	"fontconfig", "freetype", "gcrypt", "gdbm", "gio-2.0", "glib-2.0", "gmp", "gnutls",
	"gobject-2.0", "gpg-error", "gssapi_krb5", "gtk-3", "harfbuzz", "hogweed", "icudata",
	"icui18n", "icuuc", "idn2", "jpeg", "k5crypto", "keyutils", "krb5", "lber-2.5", "ldap-2.5",
	"lz4", "lzma", "magic", "mount", "ncursesw", "nettle", "nghttp2", "nss3", "numa", "p11-kit",
	"pam", "pcre2-8", "png16", "psl", "python3.11", "readline", "rtmp", "sasl2", "seccomp",
	"selinux", "smartcols", "sqlite3", "ssh2", "ssl", "stdc++", "systemd", "tasn1", "tiff",
	"tinfo", "udev", "unistring", "uuid", "webp", "x264", "x265", "xml2", "xxhash", "z", "zstd",
}

// distroLibraries returns n distinct library names: the stems, then the
// stems again with "-2", "-3"… appended. Every 50th has a SONAME without
// a version (libfoo.so), as some vendor libraries do.
func distroLibraries(n int) []libName {
	names := make([]libName, 0, n)
	for i := range n {
		stem := "lib" + distroStems[i%len(distroStems)]
		if gen := i / len(distroStems); gen > 0 {
			stem += fmt.Sprintf("-%d", gen+1)
		}
		if i%50 == 49 {
			names = append(names, libName{soname: stem + ".so", file: stem + ".so"})
			continue
		}
		// Spread majors, minors and patches over one to three digits.
		major, minor, patch := (i*7)%120, (i*13)%20, (i*31)%300
		soname := fmt.Sprintf("%s.so.%d", stem, major)
		names = append(names, libName{
			soname:  soname,
			file:    fmt.Sprintf("%s.%d.%d", soname, minor, patch),
			devLink: stem + ".so",
		})
	}
	return names
}

// cudaSonames are the libraries of a CUDA 12.4 toolkit's lib64.
var cudaSonames = []string{
	"libcudart.so.12", "libcublas.so.12", "libcublasLt.so.12", "libcufft.so.11", "libcufftw.so.11",
	"libcurand.so.10", "libcusolver.so.11", "libcusolverMg.so.11", "libcusparse.so.12",
	"libnppc.so.12", "libnppial.so.12", "libnppicc.so.12", "libnppidei.so.12", "libnppif.so.12",
	"libnppig.so.12", "libnppim.so.12", "libnppist.so.12", "libnppisu.so.12", "libnppitc.so.12",
	"libnpps.so.12", "libnvjpeg.so.12", "libnvrtc.so.12", "libnvrtc-builtins.so.12.4",
	"libnvToolsExt.so.1", "libnvJitLink.so.12", "libcupti.so.12", "libnvblas.so.12",
	"libcudnn.so.9", "libnccl.so.2", "libcufile.so.0", "libcufile_rdma.so.1", "libaccinj64.so.12.4",
}

// cudaLibraries returns n CUDA library names: cudaSonames, then made-up
// libcudaextra<i>.so.12 names.
func cudaLibraries(n int) []libName {
	names := make([]libName, 0, n)
	for i := range n {
		soname := fmt.Sprintf("libcudaextra%d.so.12", i)
		if i < len(cudaSonames) {
			soname = cudaSonames[i]
		}
		names = append(names, libName{soname: soname, file: soname + ".4.127"})
	}
	return names
}
