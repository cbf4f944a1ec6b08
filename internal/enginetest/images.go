package enginetest

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"
)

// The busybox every engine suite runs: a static busybox, the PATH images get.
const (
	BusyboxSource = "/bin/busybox"
	ImagePath     = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
)

// BusyboxLayer returns RootfsLayer of the host's static busybox (apt-get install busybox-static).
func BusyboxLayer() ([]byte, error) {
	out, err := exec.Command(BusyboxSource, "--list").Output()
	if err != nil {
		return nil, fmt.Errorf("%s --list (apt-get install busybox-static): %w", BusyboxSource, err)
	}
	busybox, err := os.ReadFile(BusyboxSource)
	if err != nil {
		return nil, err
	}
	return RootfsLayer(busybox, strings.Fields(string(out)))
}

// RootfsLayer returns a tar of a busybox root filesystem: /bin/busybox, a symlink per applet,
// the directories a container needs, and a root user.
func RootfsLayer(busybox []byte, applets []string) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	mtime := time.Unix(1700000000, 0)
	add := func(h *tar.Header, data []byte) error {
		h.ModTime, h.Format = mtime, tar.FormatPAX
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	for _, d := range []string{"bin", "dev", "etc", "proc", "root", "sbin", "sys", "usr", "usr/bin", "usr/lib", "usr/sbin", "var", "var/run"} {
		if err := add(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755}, nil); err != nil {
			return nil, err
		}
	}
	if err := add(&tar.Header{Typeflag: tar.TypeDir, Name: "tmp/", Mode: 0o1777}, nil); err != nil {
		return nil, err
	}
	if err := add(&tar.Header{Typeflag: tar.TypeReg, Name: "bin/busybox", Mode: 0o755, Size: int64(len(busybox))}, busybox); err != nil {
		return nil, err
	}
	for _, a := range applets {
		if a == "busybox" || strings.Contains(a, "/") {
			continue
		}
		if err := add(&tar.Header{Typeflag: tar.TypeSymlink, Name: "bin/" + a, Linkname: "busybox", Mode: 0o777}, nil); err != nil {
			return nil, err
		}
	}
	for name, content := range map[string]string{
		"etc/passwd": "root:x:0:0:root:/root:/bin/sh\n",
		"etc/group":  "root:x:0:\n",
	} {
		if err := add(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(content))}, []byte(content)); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// DockerArchive returns a `docker save`-format archive of one-layer images, one per tag, each
// with its CMD.
func DockerArchive(layer []byte, cmds map[string][]string) ([]byte, error) {
	sum := sha256.Sum256(layer)
	diffID := "sha256:" + hex.EncodeToString(sum[:])
	type manifestEntry struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	files := map[string][]byte{"layer.tar": layer}
	var manifest []manifestEntry
	for tag, cmd := range cmds {
		config, err := json.Marshal(map[string]any{
			"architecture": runtime.GOARCH,
			"os":           "linux",
			"created":      "2023-11-14T22:13:20Z",
			"config":       map[string]any{"Cmd": cmd, "Env": []string{ImagePath}},
			"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{diffID}},
		})
		if err != nil {
			return nil, err
		}
		cs := sha256.Sum256(config)
		name := hex.EncodeToString(cs[:]) + ".json"
		files[name] = config
		manifest = append(manifest, manifestEntry{Config: name, RepoTags: []string{tag}, Layers: []string{"layer.tar"}})
	}
	m, err := json.Marshal(manifest)
	if err != nil {
		return nil, err
	}
	files["manifest.json"] = m

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for name, data := range files {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(data)), ModTime: time.Unix(1700000000, 0)}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
